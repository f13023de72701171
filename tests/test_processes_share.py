"""Many processes, one answer: processes that share a cache directory tune a key once."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fork and file locks of POSIX")

MODULE = """
import os, sys, time
import numbatune as nt
from numba import cuda


def launch(a, out, *, BLOCK):
    if os.environ.get("HOLD_TUNING"):
        print("tuning", flush=True)
        time.sleep(3600)  # holds the key's lock until it is killed
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


@nt.autotune(variants=nt.product(BLOCK=[2, 4, 8, 16]), launch=launch)
@cuda.jit
def add_one(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i] + 1
"""

SCRIPT = """
import json
import numbatune
import numpy as np
from numba import cuda
import shared_kernel

a = cuda.to_device(np.arange(32, dtype=np.float32))
out = cuda.to_device(np.zeros(32, np.float32))
report = shared_kernel.add_one.tune(a, out)
shared_kernel.add_one(a, out)
print(json.dumps({"source": report.source, "best": report.best,
                  "right": out.copy_to_host().tolist() == list(range(1, 33))}))
"""


def _start(tmp_path, **env):
    (tmp_path / "shared_kernel.py").write_text(textwrap.dedent(MODULE))
    environment = {
        **os.environ,
        **env,
        "NUMBATUNE_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip


def _result(process):
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_processes_tuning_one_new_key_tune_it_once_and_run_one_winner(tmp_path):
    processes = [_start(tmp_path) for _ in range(4)]
    results = [_result(p) for p in processes]
    assert sorted(r["source"] for r in results) == ["benchmark", "disk", "disk", "disk"]
    assert len({json.dumps(r["best"]) for r in results}) == 1
    assert all(r["right"] for r in results)


def test_a_process_that_dies_holding_a_key_does_not_block_the_others(tmp_path):
    holder = _start(tmp_path, HOLD_TUNING="1")
    assert holder.stdout.readline().strip() == "tuning"  # it holds the key's lock
    waiter = _start(tmp_path)
    holder.kill()
    holder.wait()
    result = _result(waiter)
    assert result["source"] == "benchmark" and result["right"]


@cuda.jit
def copy(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] = a[i]


@pytest.mark.skipif(
    not SIMULATOR, reason="CUDA cannot be used in a child forked from a process that initialised it"
)
def test_a_process_forked_while_a_thread_tunes_a_key_does_not_wait_for_it(monkeypatch):
    # Memory only: with a cache directory the child would wait, as any other process, for the
    # parent's tuning of the key to be stored, which here waits for the child.
    monkeypatch.setattr(nt.settings, "cache_dir", None)
    release = threading.Event()
    started = threading.Event()

    def launch(a, out, *, BLOCK):
        started.set()
        release.wait()  # this thread stays in tuning until the child has finished
        return nt.cdiv(a.shape[0], BLOCK), BLOCK

    tuned = nt.autotune(variants=nt.product(BLOCK=[2, 4]), launch=launch)(copy)
    a, out = cuda.to_device(np.arange(8, dtype=np.float32)), cuda.to_device(np.zeros(8))
    tuning = threading.Thread(target=tuned.tune, args=(a, out))
    tuning.start()
    started.wait(timeout=60)
    child = os.fork()
    if child == 0:  # the child: the key is pending in the parent's other thread
        release.set()  # (its copy of the event: the child's own thread-less world)
        try:
            tuned.tune(a, out)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(child, 0)
    release.set()
    tuning.join()
    assert os.WEXITSTATUS(status) == 0
