"""Compiling ahead of time with no GPU: every variant for a compute capability, in workers."""

import errno
import json
import os
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import processes
from numbatune.cache import disk
from numbatune.cache.disk import KERNELS, Folder
from numbatune.cli import main
from numbatune.compile.compiler import build_task, worker_environment
from numbatune.compile.store import KernelStore, kernels_folder
from numbatune.compilers.base import Built, LinkFailed
from numbatune.demo import load_module
from numbatune.identity import folder_name
from numbatune.precompile import precompile
from tests import compiled_examples
from tests.read_only import made_read_only, read_only, run, run_read_only

pytestmark = pytest.mark.skipif(not processes.available(), reason="worker processes need POSIX")

MODULE = """
import os
import numbatune as nt
from numba import cuda

FACTOR = 2
BLOCK = 32


class ExitOnLoad:
    \"\"\"A value whose unpickling ends the process that unpickles it.\"\"\"

    def __reduce__(self):
        return os._exit, (9,)


EXIT_ON_LOAD = ExitOnLoad()


def launch(a, *, BLOCK):
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


@nt.autotune(variants=nt.product(FACTOR=[2, None, 3], BLOCK=[32, 64]), launch=launch)
@cuda.jit
def scale(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] *= FACTOR


STEPS = 2


@nt.autotune(variants=[{"STEPS": 2}, {"STEPS": 2.5}], launch=lambda a, *, STEPS: (1, 1))
@cuda.jit
def stepped(a):
    for step in nt.static_range(STEPS):
        a[0] += step


@cuda.jit(device=True)
def twice(x):
    return 2 * x


@nt.autotune(variants=nt.product(FACTOR=[2, 3]), launch=lambda a, *, FACTOR: (1, 1))
@cuda.jit
def helped(a):
    a[0] = twice(a[0]) * FACTOR


@nt.autotune(variants=[{"BLOCK": 32}], launch=launch)
@cuda.jit
def doomed(a):
    if EXIT_ON_LOAD is not None:
        a[0] = 1
"""

#: MODULE's kernels as examples (``numbatune compile`` compiles those).
EXAMPLES = """

def example(small):
    return scale.with_variants([{"FACTOR": 2, "BLOCK": 32}]), (cuda.device_array(8),)


def example_helped(small):
    return helped, (cuda.device_array(1),)
"""


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "precompiled_kernels.py"
    path.write_text(textwrap.dedent(MODULE))
    return load_module(path)


def test_each_variant_compiles_once_per_distinct_kernel_or_reports_its_error(module, tmp_path):
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    compiled = precompile([(module.scale, args)], (9, 0), tmp_path / "cache", workers=2)
    by_variant = {c.variant: c for c in compiled}
    assert len(compiled) == 6
    good = by_variant["FACTOR=2, BLOCK=32"]
    assert good.error is None and good.shares is None and good.resources.registers > 0
    assert good.signature == "array(float32, 1d, C)"
    assert by_variant["FACTOR=2, BLOCK=64"].shares == "FACTOR=2, BLOCK=32"  # BLOCK: launch only
    assert "TypingError" in by_variant["FACTOR=None, BLOCK=32"].error
    assert by_variant["FACTOR=None, BLOCK=64"].error == by_variant["FACTOR=None, BLOCK=32"].error
    assert by_variant["FACTOR=3, BLOCK=32"].error is None
    assert list((tmp_path / "cache" / "kernels" / "sm_90").iterdir())


def test_each_kernel_is_kept_as_soon_as_it_is_compiled(module, tmp_path):
    """A compile stopped part way (a build's time limit) keeps the kernels it finished."""
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    two = module.scale.with_variants([{"FACTOR": 2, "BLOCK": 32}, {"FACTOR": 3, "BLOCK": 32}])
    store = KernelStore(tmp_path / "cache", (9, 0), two.function_id)
    kept = []
    precompile(
        [(two, args)], (9, 0), tmp_path / "cache", workers=1,
        done=lambda finished, total: kept.append((finished, len(store._open().stored_keys()))),
    )  # fmt: skip
    assert kept == [(1, 1), (2, 2)]


def test_a_worker_that_dies_fails_that_kernel_and_the_others_compile(module, tmp_path):
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    cases = [
        (module.doomed, args),
        (module.scale.with_variants([{"FACTOR": 2, "BLOCK": 32}]), args),
    ]
    doomed, scale = precompile(cases, (9, 0), tmp_path / "cache", workers=1)
    assert "died (exit status 9)" in doomed.error
    assert scale.error is None


def test_a_kernel_whose_loops_cannot_be_written_out_fails_alone(module, tmp_path):
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    two, bad = precompile([(module.stepped, args)], (9, 0), tmp_path / "cache", workers=2)
    assert two.error is None
    assert bad.error.startswith("KernelSourceError") and "compile-time integers" in bad.error


def test_a_missing_compiler_library_ends_the_compile_in_one_line_naming_the_extra(
    module, tmp_path, monkeypatch, capsys
):
    from numbatune import precompile as precompiling

    calls = tmp_path / "calls"
    task = processes.Task("tests.workers", "compiler_library_not_found", (str(calls),))
    monkeypatch.setattr(precompiling, "build_task", lambda *args: task)
    path = tmp_path / "examples.py"  # three kernels to build
    path.write_text(textwrap.dedent(MODULE) + EXAMPLES)
    argv = ["compile", str(path), "--cc", "9.0", "--cache-dir", str(tmp_path), "--workers", "1"]
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    extra = "cu12" if metadata.version("cuda-bindings").startswith("12.") else "cu13"
    assert err.splitlines()[-1] == (
        "numbatune: error: a CUDA compiler library is not installed (Failure finding "
        f'"libnvrtc.so.13"); pip install "numbatune[{extra}]" installs them'
    )
    assert calls.read_text() == "compiled\n"  # the other kernels were not tried


def test_a_compile_past_the_time_limit_fails_with_the_limit_named(module, tmp_path):
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    nt.configure(compile_timeout_s=0.001)
    try:
        (compiled,) = precompile(
            [(module.scale.with_variants([{"FACTOR": 2, "BLOCK": 32}]), args)],
            (9, 0),
            tmp_path / "cache",
        )
    finally:
        nt.configure(compile_timeout_s=300)
    assert "time limit of 0.001 s" in compiled.error


def test_variants_that_differ_only_in_their_register_cap_share_one_compile(module):
    import numba

    argtypes = (numba.typeof(cuda.to_device(np.zeros(4, np.float32))),)
    kernels = [[nt.Variant({"FACTOR": 2}, **cap)]
               for cap in ({}, {"max_registers": 32}, {"max_registers": 64})]  # fmt: skip
    template = module.scale._template
    assert len({template.build_key(members[0]) for members in kernels}) == 1
    assert len({template.code_key(members[0]) for members in kernels}) == 3
    task = build_task(template, kernels, argtypes, (9, 0))
    pool = processes.WorkerPool(1, _environment())
    try:
        (outcome,) = pool.run([processes.Task("tests.workers", "built_counting_compiles",
                                              task.args)], 300)  # fmt: skip
    finally:
        pool.close()
    caps, resources, compiles = outcome.value
    assert caps == [None, 32, 64]  # each kernel linked with its own cap
    assert all(r.registers > 0 for r in resources)
    assert compiles == 1


def test_a_kernel_that_does_not_link_fails_with_the_linkers_error_for_each_register_cap():
    pool = processes.WorkerPool(1, _environment())
    try:
        (outcome,) = pool.run([processes.Task("tests.workers", "built_unlinked", ((None, 32),))],
                              300)  # fmt: skip
    finally:
        pool.close()
    assert [type(b) for b in outcome.value] == [LinkFailed] * 2
    assert all("Unresolved extern function 'numbatune_missing'" in b.error for b in outcome.value)


def _payload(module, tmp_path):
    """A kernel built in a worker, serialised."""
    import numba

    pool = processes.WorkerPool(1, _environment())
    argtypes = (numba.typeof(cuda.to_device(np.zeros(4, np.float32))),)
    task = build_task(module.scale._template, [[nt.Variant({"FACTOR": 2, "BLOCK": 32})]],
                      argtypes, (9, 0))  # fmt: skip
    try:
        (outcome,) = pool.run([task], limit_s=300)
        (built,) = outcome.value
        return built.payload, pool
    except Exception:
        pool.close()
        raise


def test_a_worker_compiles_a_device_function_once_for_all_the_kernels_it_builds(module):
    import numba

    argtypes = (numba.typeof(cuda.to_device(np.zeros(4, np.float32))),)
    template = module.helped._template
    tasks = [
        build_task(template, [[variant]], argtypes, (9, 0)) for variant in module.helped.variants
    ]
    pool = processes.WorkerPool(1, _environment())
    try:
        *built, compiled = (
            outcome.value
            for outcome in pool.run(
                [*tasks, processes.Task("tests.workers", "device_functions", ())], 300
            )
        )
    finally:
        pool.close()
    assert [[type(b) for b in kernels] for kernels in built] == [[Built]] * 2
    assert compiled == [("twice", 1)]  # one dispatcher, compiled for one signature


def _environment():
    from numbatune.compile.compiler import worker_environment

    return worker_environment()


@pytest.mark.parametrize(
    ("damage", "loads", "kept"), [("good", True, True), ("garbage", False, False),
                                  ("foreign", False, False), ("wrong contents", False, False)]
)  # fmt: skip
def test_stored_kernels_that_do_not_load_are_discarded_never_used(
    module, tmp_path, damage, loads, kept
):
    payload, pool = _payload(module, tmp_path)
    try:
        task = processes.Task(
            "tests.workers", "store_round_trip", (str(tmp_path / "store"), (9, 0), payload, damage)
        )
        (outcome,) = pool.run([task], limit_s=120)
    finally:
        pool.close()
    name, still_there = outcome.value
    assert (name is not None) == loads and "scale" in (name or "scale")
    assert still_there == kept


def test_a_kernel_store_cleared_under_a_running_process_takes_its_kernels_again(
    numbatune_cache, capsys
):
    """A process that stored a kernel, then saw the cache cleared (`numbatune cache clear`,
    here or in another shell), stores it again where it tunes next: its store says it no
    longer holds the kernel, and what it saves lands in the fresh store."""
    store = KernelStore(numbatune_cache, (9, 0), "f")
    assert store.save("k", b"kernel") and store.holds("k")
    assert main(["cache", "clear"]) == 0
    capsys.readouterr()
    assert not store.holds("k")
    assert store.save("k", b"kernel")
    assert KernelStore(numbatune_cache, (9, 0), "f").holds("k")


def test_a_kernel_that_does_not_serialise_is_tried_once_in_a_process(
    module, numbatune_cache, monkeypatch
):
    """A compiled kernel that cannot be serialised (numba serialises no kernel that links extra
    files) is not kept in the kernel store, and the tunings after the compile that met it do
    not serialise it again in this process: each would fail as the first did."""
    import numba

    from numbatune.compile import compiler as compiling

    tried = []

    def unserialisable(self, kernel):
        tried.append(kernel)
        raise RuntimeError("links extra files")

    kernels = type(module.scale._template.compiler)
    monkeypatch.setattr(kernels, "serialise", unserialisable)
    monkeypatch.setattr(kernels, "compiled", lambda self, dispatcher, argtypes: "kernel")
    monkeypatch.setattr(compiling, "_toolchain", lambda kernels: ("tools",))  # (none simulated)
    compiler = compiling.Compiler(module.scale._template, module.scale.function_id)
    variant, argtypes = module.scale.variants[0], (numba.float32[::1],)
    compiler.dispatcher(variant)
    compiler._save(variant, argtypes, numbatune_cache, "kernel")  # as compiled here
    for _ in range(2):  # a later tuning of the kernel, compiled already
        assert compiler._missing(variant, [argtypes], compiling.Tally(), numbatune_cache) == []
    assert tried == ["kernel"]
    cc = tuple(cuda.get_current_device().compute_capability)
    assert KernelStore(numbatune_cache, cc, module.scale.function_id)._open().stored_keys() == []


READ_STORE = """
import json
import sys
from pathlib import Path

from numbatune.compile.store import KernelStore, kernels_folder

store = KernelStore(Path(sys.argv[1]), (9, 0), sys.argv[2])
stored = [key for key in store._open().stored_keys() if not key.startswith("ran ")]
print(json.dumps({"loaded": [store.load(key) is not None for key in stored],
                  "held": [store.holds(key) for key in stored] + [store.holds("other")]}))
"""


def test_a_read_only_kernel_store_loads_its_kernels(module, tmp_path):
    """A kernel store shipped in an image (read-only) is read, not left unused, and says which
    kernels it holds."""
    args = (cuda.to_device(np.zeros(8, np.float32)),)
    two = module.scale.with_variants([{"FACTOR": 2, "BLOCK": 32}, {"FACTOR": 3, "BLOCK": 32}])
    assert [c.error for c in precompile([(two, args)], (9, 0), tmp_path, workers=1)] == [None] * 2
    ran = run_read_only(
        READ_STORE, tmp_path, str(tmp_path), two.function_id, env=worker_environment()
    )
    assert ran["loaded"] == [True, True], ran["stderr"]
    assert ran["held"] == [True, True, False]
    assert "cannot be written" in ran["stderr"] and "what it holds is used" in ran["stderr"]


CLI_MODULE = """
import numpy as np
import numbatune as nt
from numba import cuda

FACTOR = 2


@nt.autotune(variants=nt.product(FACTOR=[2, 3]), launch=lambda a, *, FACTOR: (1, 32))
@cuda.jit
def doubled(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] *= FACTOR


def example(small):
    return doubled, (cuda.to_device(np.zeros(8, np.float32)),)
"""


@pytest.fixture
def two_kernels(tmp_path):
    """A module for ``numbatune compile``: two kernels to build."""
    path = tmp_path / "two_kernels.py"
    path.write_text(CLI_MODULE)
    return path


def _compile(module: Path, cache: Path, *options: str) -> list[str]:
    return ["compile", str(module), "--cc", "9.0", "--cache-dir", str(cache), *options]


def test_compile_into_a_file_or_a_read_only_folder_fails_at_once_saying_why(
    two_kernels, tmp_path, capsys
):
    (tmp_path / "a file").write_text("")
    assert main(_compile(two_kernels, tmp_path / "a file")) == 2
    assert "a file is a file, not a folder" in capsys.readouterr().err
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    with made_read_only(shipped):
        arguments = [sys.executable, "-m", "numbatune", *_compile(two_kernels, shipped)]
        done = run(arguments, shipped, read_only)
    assert done.returncode == 2 and "shipped is read-only" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("def example(small:\n", "SyntaxError: "),
        (
            "import no_such_module_here\n",
            "ModuleNotFoundError: No module named 'no_such_module_here'",
        ),
    ],
    ids=["a syntax error", "an import that fails"],
)
def test_compile_of_a_module_that_does_not_import_says_why_in_one_line(
    tmp_path, capsys, code, says
):
    module = tmp_path / "broken.py"
    module.write_text(code)
    assert main(_compile(module, tmp_path / "cache")) == 2
    [said] = capsys.readouterr().err.strip().splitlines()
    assert said.startswith(f"numbatune: error: cannot import {module}: {says}"), said


def test_compile_of_an_example_that_raises_says_which_and_why_in_one_line(tmp_path, capsys):
    module = tmp_path / "raising.py"
    module.write_text("def example(small):\n    raise RuntimeError('no GPU data here')\n")
    assert main(_compile(module, tmp_path / "cache")) == 2
    [said] = capsys.readouterr().err.strip().splitlines()
    assert said == (
        f"numbatune: error: {module}: example(small=True) raised RuntimeError: no GPU data here"
    )


def test_compile_onto_a_full_disk_says_how_many_were_kept_and_fails(
    two_kernels, tmp_path, capsys, monkeypatch
):
    saved = []

    def set_until_full(cache, key, value, **options):
        if saved:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(key)
        return True

    monkeypatch.setattr(disk.diskcache.Cache, "set", set_until_full)
    assert main(_compile(two_kernels, tmp_path)) == 1
    assert "2 kernels built" in (err := capsys.readouterr().err)
    assert "only 1 of 2 kept" in err and "the disk is full" in err


def test_compile_into_a_garbage_store_sets_it_aside_and_keeps_every_kernel(
    two_kernels, tmp_path, capsys
):
    doubled = load_module(two_kernels).doubled
    folder = kernels_folder(tmp_path, (9, 0)) / folder_name(doubled.function_id)
    folder.mkdir(parents=True)
    (folder / "cache.db").write_bytes(b"garbage" * 1000)
    assert main(_compile(two_kernels, tmp_path)) == 0
    assert "kept in" in capsys.readouterr().err
    assert len(Folder(folder, "test", KERNELS).stored_keys()) == 2
    assert len(list(folder.parent.glob("*.corrupt-*"))) == 1


def test_every_variant_of_every_example_compiles_for_sm_90(tmp_path):
    """CI's check that the examples compile for the H100, which the simulator never does: the
    kernels the record (tests/compiled_examples.py) does not hold, and one of each example."""
    record = json.loads(compiled_examples.RECORD.read_text())
    every = list(compiled_examples.kernels(compiled_examples.toolchain()))
    assert len(every) >= 250  # (269 builds of the examples' variants under the simulator)
    first_of_each = {k.tuned.function_id: k for k in reversed(every)}.values()
    unrecorded = [k for k in every if k.key not in record["compiled"]]
    chosen = list({k.key: k for k in [*first_of_each, *unrecorded]}.values())
    rows = compiled_examples.compile_kernels(chosen, tmp_path)
    failed = [f"{row.kernel} {row.variant}: {row.error}" for row in rows if row.error]
    assert failed == []
    assert len(rows) == sum(len(k.variants) for k in chosen)
    print(
        f"{len(chosen)} of {len(every)} kernels compiled for sm_90; the record holds the others"
        + (" (renew it: python -m tests.compiled_examples)" if unrecorded else "")
    )


KEY_SCRIPT = """
import json, sys
import numbatune
from numbatune.demo import load_module
from numbatune.identity import folder_name

module = load_module(__import__("pathlib").Path(sys.argv[1]))
tuned = module.scale
template = tuned._template
print(json.dumps([template.code_text(), [template.code_key(v) for v in tuned.variants]]))
"""


def test_a_kernels_compile_keys_are_the_same_in_a_simulated_process_and_a_real_one(tmp_path):
    """numbatune compile runs simulated; the GPU process must find what it compiled."""
    import subprocess
    import sys

    path = tmp_path / "keyed_kernels.py"
    path.write_text(textwrap.dedent(MODULE))
    keys = []
    for simulator in ("1", "0"):  # "0" with no GPU: decorating needs none
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": simulator}
        done = subprocess.run(
            [sys.executable, "-c", KEY_SCRIPT, str(path)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        keys.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert keys[0] == keys[1]
