"""Compiling variants on a GPU: once per distinct kernel, in workers, kept on disk for the next
process; kernels compiled ahead of time with no GPU are the ones a GPU process launches."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from tests import kernels

pytestmark = pytest.mark.gpu

MODULE = """
import numbatune as nt
from numba import cuda

FACTOR = 2


@nt.autotune(
    variants=nt.product(FACTOR=[2, 3, 4], BLOCK=[64, 128]),
    launch=lambda a, out, *, BLOCK: (nt.cdiv(a.shape[0], BLOCK), BLOCK),
)
@cuda.jit
def scale(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] * FACTOR
"""

SCRIPT = """
import json, sys, time
import numbatune
import numpy as np
from numba import cuda
import tunedscale
from numbatune.compile.compiler import compile_pool
from numbatune.compilers import NUMBA_CUDA

prepared = compile_pool(NUMBA_CUDA, numbatune.settings.compile_workers)._server is not None

if sys.argv[1] == "precompile":
    from numbatune.precompile import precompile
    args = (cuda.to_device(np.ones(4, np.float32)), cuda.to_device(np.zeros(4, np.float32)))
    compiled = precompile([(tunedscale.scale, args)], (9, 0), numbatune.settings.cache_dir)
    print(json.dumps([c.error for c in compiled]))
else:
    a = cuda.to_device(np.arange(1000, dtype=np.float32))
    out = cuda.device_array(1000, np.float32)
    cuda.synchronize()
    started = time.perf_counter()
    tunedscale.scale(a, out)
    cuda.synchronize()
    seconds = time.perf_counter() - started
    factor = float(out.copy_to_host()[1])
    stats = tunedscale.scale.stats
    print(json.dumps({"seconds": seconds, "stats": stats, "factor": factor, "prepared": prepared}))
"""


def _run(tmp_path, mode, simulator=False):
    (tmp_path / "tunedscale.py").write_text(textwrap.dedent(MODULE))
    env = {**os.environ, "NUMBATUNE_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), mode],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_variants_that_differ_in_the_launch_only_share_one_compile():
    tuned = nt.autotune(
        variants=nt.product(BLOCK=[32, 64, 96, 128, 192, 256, 384, 512, 768, 1024]),
        launch=kernels.accumulate_launch,
    )(kernels.accumulate)
    a, out = cuda.to_device(np.ones(4096, np.float32)), cuda.to_device(np.zeros(4096, np.float32))
    report = tuned.tune(a, out)
    assert report.source == "benchmark" and report.compiles == 1
    assert tuned.stats["compiles"] == 1


def test_variants_compiled_in_workers_compute_what_numba_compiles():
    from numbatune.compile.compiler import compile_pool
    from numbatune.compilers import NUMBA_CUDA

    tuned = nt.autotune(
        variants=nt.product(REPS=[1, 2, 3, 4]),
        launch=lambda a, out: (nt.cdiv(a.shape[0], 128), 128),
    )(kernels.repeated_sine)
    a = cuda.to_device(np.linspace(0, 1, 1000).astype(np.float32))
    out, expected = cuda.device_array(1000, np.float32), cuda.device_array(1000, np.float32)
    report = tuned.tune(a, out)
    # four kernels to compile: in worker processes
    assert compile_pool(NUMBA_CUDA, nt.settings.compile_workers) is not None
    assert report.compiles == 4 and report.compile_s > 0 and report.benchmark_s > 0
    try:
        for variant in tuned.variants:
            tuned.run_variant(variant, a, out)
            kernels.REPS = variant.params["REPS"]
            reference = cuda.jit(kernels.repeated_sine.py_func)  # numba's, in this process
            reference[nt.cdiv(1000, 128), 128](a, expected)
            np.testing.assert_array_equal(out.copy_to_host(), expected.copy_to_host())
    finally:
        kernels.REPS = 1


def test_a_tuning_compiles_with_the_settings_it_began_with(monkeypatch):
    """``compile_timeout_s`` changed once a tuning has begun (here by its prune function, which
    runs as it plans) applies to the next tuning: this one's builds in workers keep theirs."""
    monkeypatch.setattr(nt.settings, "cache_dir", None)  # (compiled, not loaded)
    monkeypatch.setattr(nt.settings, "compile_workers", max(2, nt.settings.compile_workers))
    monkeypatch.setattr(nt.settings, "compile_timeout_s", 300.0)

    def prune(key, variants):
        nt.configure(compile_timeout_s=0.001)
        return variants

    tuned = nt.autotune(
        variants=nt.product(REPS=[5, 6, 7]),
        launch=lambda a, out: (nt.cdiv(a.shape[0], 128), 128),
        prune=prune,
    )(kernels.repeated_sine)
    a = cuda.to_device(np.linspace(0, 1, 1000).astype(np.float32))
    report = tuned.tune(a, cuda.device_array(1000, np.float32))
    assert report.compiles == 3 and all(r.error is None for r in report.results)
    assert nt.settings.compile_timeout_s == 0.001  # (a build in a worker takes longer)


def test_a_fresh_process_with_the_key_stored_compiles_nothing(tmp_path):
    first = _run(tmp_path, "tune")
    second = _run(tmp_path, "tune")
    assert first["stats"]["compiles"] == 3 and first["stats"]["benchmarks"] == 1
    assert second["stats"] == {"compiles": 0, "loaded": 1, "benchmarks": 0}
    assert second["factor"] == first["factor"]
    assert first["prepared"] and not second["prepared"]  # workers got ready only to tune


def test_kernels_compiled_with_no_gpu_are_the_ones_a_gpu_process_launches(tmp_path):
    assert _run(tmp_path, "precompile", simulator=True) == [None] * 6
    tuned = _run(tmp_path, "tune")
    assert tuned["stats"] == {"compiles": 0, "loaded": 3, "benchmarks": 1}


def test_kernels_written_out_in_workers_are_compiled_largest_first_and_compute_right(monkeypatch):
    from numbatune.compile.compiler import Compiler
    from tests.test_unroll import prefix_sums

    orders = []
    compile_in_workers = Compiler._compile_in_workers

    def noted(self, pool, builds, *rest):
        orders.append([kernels[0][0][0].params["STEPS"] for kernels in builds])
        return compile_in_workers(self, pool, builds, *rest)

    monkeypatch.setattr(Compiler, "_compile_in_workers", noted)
    host = np.arange(1, 9, dtype=np.float32)
    a, out = cuda.to_device(host), cuda.device_array(8, np.float32)
    prefix_sums.tune(a, out, force=True)
    assert orders == [[4, 3, 1]]  # the user's order: 1, 3, 4
    for steps in (1, 3, 4):  # each compiled in a worker from a function written out there
        out = cuda.to_device(np.zeros(8, np.float32))
        prefix_sums.run_variant({"STEPS": steps}, a, out)
        np.testing.assert_array_equal(out.copy_to_host()[:steps], np.cumsum(host)[:steps])


def test_a_tuning_keeps_its_kernels_beside_its_results_when_the_setting_changes_meanwhile(
    numbatune_cache, tmp_path, monkeypatch
):
    """A tuning reads its settings once: a ``configure(cache_dir=...)`` made while it compiles
    (from another thread, say) does not send its kernels to another cache directory than its
    results."""
    from numbatune.compile.compiler import Compiler

    other, add = tmp_path / "other", Compiler._add

    def add_then_move(self, *args, **options):
        nt.configure(cache_dir=other)  # as another thread might, while this tuning compiles
        return add(self, *args, **options)

    monkeypatch.setattr(Compiler, "_add", add_then_move)

    @nt.autotune(variants=nt.product(BLOCK=[32, 64]),
                 launch=lambda x, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK))  # fmt: skip
    @cuda.jit
    def bump(x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] += 1

    bump.tune(cuda.device_array(64, np.float32))
    assert len(list((numbatune_cache / "kernels").rglob("cache.db"))) == 1
    assert not (other / "kernels").exists()
