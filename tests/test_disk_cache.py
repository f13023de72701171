"""The disk tune cache across processes: hits, checksum mismatches and corruption."""

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from numba import cuda

import numbatune as nt
from numbatune.cache.disk import Folder
from tests import kernels

KERNEL_MODULE = """
from numba import cuda
import numbatune as nt

BLOCK = 4


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4, 8]),
    launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def add(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] + {increment}
"""

SCRIPT = """
import json
import numbatune  # first: with no GPU it chooses numba's simulator for this process
import numpy as np
from numba import cuda
import tunedkernel

a = cuda.to_device(np.arange(8, dtype=np.float32))
out = cuda.to_device(np.zeros(8, np.float32))
report = tunedkernel.add.tune(a, out)
tunedkernel.add(a, out)
print(json.dumps({
    "source": report.source,
    "best": report.best,
    "stats": tunedkernel.add.stats,
    "out": out.copy_to_host().tolist(),
}))
"""


def run_in_new_process(module_dir: Path, cache_dir: Path, increment: int = 1) -> tuple[dict, str]:
    """Tune and call the kernel module in a fresh process; its JSON result and its stderr."""
    (module_dir / "tunedkernel.py").write_text(KERNEL_MODULE.format(increment=increment))
    env = {
        **os.environ,
        "NUMBATUNE_CACHE_DIR": str(cache_dir),
        "PYTHONPATH": os.pathsep.join(
            [str(module_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        cwd=module_dir,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_second_process_answers_from_disk_without_benchmarking(tmp_path):
    first, _ = run_in_new_process(tmp_path, tmp_path / "cache")
    second, _ = run_in_new_process(tmp_path, tmp_path / "cache")
    assert first["source"] == "benchmark" and first["stats"]["benchmarks"] == 1
    assert second["source"] == "disk" and second["stats"]["benchmarks"] == 0
    assert second["best"] == first["best"]
    assert second["out"] == [x + 1 for x in range(8)]


def test_changing_the_kernel_source_invalidates_the_stored_result(tmp_path):
    run_in_new_process(tmp_path, tmp_path / "cache", increment=1)
    changed, _ = run_in_new_process(tmp_path, tmp_path / "cache", increment=2)
    assert changed["source"] == "benchmark"
    assert changed["out"] == [x + 2 for x in range(8)]
    again, _ = run_in_new_process(tmp_path, tmp_path / "cache", increment=2)
    assert again["source"] == "disk"


def test_a_corrupted_cache_warns_and_starts_fresh(tmp_path):
    run_in_new_process(tmp_path, tmp_path / "cache")
    databases = list((tmp_path / "cache").rglob("cache.db"))
    assert databases
    for database in databases:
        database.write_bytes(b"this is not a sqlite database" * 100)
    result, stderr = run_in_new_process(tmp_path, tmp_path / "cache")
    assert result["source"] == "benchmark"
    assert result["out"] == [x + 1 for x in range(8)]
    assert "is corrupt" in stderr and "moved it to" in stderr
    assert list((tmp_path / "cache").rglob("*.corrupt-*"))


def _accumulating(blocks):
    """``kernels.accumulate`` tuned over ``blocks``."""
    return nt.autotune(variants=nt.product(BLOCK=blocks), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )


def test_a_corrupted_entry_is_tuned_again(caplog, monkeypatch):
    args = cuda.to_device(np.ones(4, np.float32)), cuda.to_device(np.zeros(4, np.float32))
    first = _accumulating([2, 4])
    first.tune(*args)
    disk = first._device_state().cache._open()
    for stored_key in disk.stored_keys():
        disk.set(stored_key, "{not json")
    kernels.forget_shared_state(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        report = _accumulating([2, 4]).tune(*args)
    assert report.source == "benchmark"
    assert "damaged tune cache entry" in caplog.text
    stored = [json.loads(disk.get(k)) for k in disk.stored_keys()]
    assert stored and all(entry["results"] for entry in stored)


LAUNCH_HELPERS = """
import numbatune as nt
from numba import cuda


def blocks(n, block):
    return nt.cdiv(n, block){edit}


def launch(a, out, *, BLOCK):
    return blocks(a.shape[0], BLOCK), BLOCK


@nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)
@cuda.jit
def add(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] + 1
"""


def test_editing_a_helper_of_the_launch_function_invalidates_the_stored_result(
    numbatune_cache, tmp_path, monkeypatch
):
    def tuned(edit):
        path = tmp_path / "launch_helpers.py"
        return kernels.load_written(path, LAUNCH_HELPERS.format(edit=edit), monkeypatch).add

    a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
    assert tuned("").tune(a, out).source == "benchmark"
    assert tuned("").tune(a, out).source == "disk"
    assert tuned(" + 1  # one block more").tune(a, out).source == "benchmark"


TUNING_OPTIONS = """
import numbatune as nt
from numba import cuda


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4]),
    launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK), {options}
)
@cuda.jit
def add(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] + 1
"""


def test_changing_the_tuning_options_of_the_decorator_keeps_the_stored_result(
    numbatune_cache, tmp_path, monkeypatch
):
    """Options on the decorator's lines (the launch function's lambda's line too) decide no
    code: a result tuned at ``full`` serves every level, search and prune function."""

    def tuned(options):
        path = tmp_path / "tuning_options.py"
        return kernels.load_written(path, TUNING_OPTIONS.format(options=options), monkeypatch).add

    a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
    full = tuned('level="full"')
    assert full.tune(a, out).source == "benchmark"
    for options in ('level="minimal"', 'search="exhaustive"', "prune=lambda key, vs: vs[::-1]"):
        kernel = tuned(options)
        assert kernel.tune(a, out).source == "disk", options
        assert kernel.stats["benchmarks"] == 0
        assert kernels.store_keys(kernel) == kernels.store_keys(full)


_KEYS_SEEN = "import diskcache, sys; print(sorted(diskcache.Cache(sys.argv[1]).iterkeys()))"


def test_results_stored_after_another_process_closed_the_cache_are_kept(tmp_path):
    """Checking the database before a write must not drop the locks SQLite holds on it: another
    process closing it would then delete the log this process still writes to."""
    folder = Folder(tmp_path / "function", "function")
    folder.set("k0", "v0")
    folder.set("k1", "v1")
    subprocess.run([sys.executable, "-c", _KEYS_SEEN, str(tmp_path / "function")], check=True)
    folder.set("k2", "v2")
    folder.set("k3", "v3")
    seen = subprocess.run(
        [sys.executable, "-c", _KEYS_SEEN, str(tmp_path / "function")],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert seen.strip() == "['k0', 'k1', 'k2', 'k3']"


def test_two_tuned_kernels_of_one_function_with_other_variants_keep_each_others_results(
    monkeypatch,
):
    def sources():
        a, out = cuda.to_device(np.ones(8, np.float32)), cuda.to_device(np.zeros(8, np.float32))
        return [_accumulating(blocks).tune(a, out).source for blocks in ([2, 4], [4, 8])]

    assert sources() == ["benchmark", "benchmark"]
    kernels.forget_shared_state(monkeypatch)  # as in a new process
    assert sources() == ["disk", "disk"]
