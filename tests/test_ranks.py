"""Ranks that agree: the processes of a torch.distributed job (gloo, under the simulator here)
tune a key together, each measuring a share, and all store and launch the same winner."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch.distributed", reason="torch is the optional extra numbatune[ranks]")

KERNELS = """
import os
import numbatune as nt
from numba import cuda

BLOCK = 4


def launch(x, out, *, BLOCK):
    if os.environ.get("DIE_WHILE_TUNING") == os.environ["RANK"]:
        os._exit(3)  # this rank dies in the middle of its share
    if str(BLOCK) in os.environ.get("FAIL_BLOCKS", "").split(","):
        return nt.cdiv(x.shape[0], BLOCK), 0  # an invalid launch: this variant fails
    return nt.cdiv(x.shape[0], BLOCK), BLOCK


@nt.autotune(variants=nt.product(BLOCK=[1, 2, 4, 8, 16, 32, 64, 128]), launch=launch)
@cuda.jit
def add_one(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i] + 1
"""

RANK = """
import datetime, json, os, sys, time
import numpy as np
import torch.distributed as dist
import numbatune as nt
from numba import cuda
from numbatune.cache import files
from numbatune.tuning import bench
import rank_kernels

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="file://" + os.environ["RENDEZVOUS"], rank=rank,
                        world_size=size, timeout=datetime.timedelta(seconds=60))
measured = []
original = bench.measure
def counted(runs, *rest, **options):
    measured.extend(v.label for v in runs)
    return original(runs, *rest, **options)
bench.measure = counted
n = int(os.environ.get("SIZE", "64"))
x, out = cuda.to_device(np.arange(n, dtype=np.float32)), cuda.to_device(np.zeros(n, np.float32))
if os.environ.get("SIZE_FIRST"):  # a key tuned together first, with time for a loaded host
    first, timeout_s = int(os.environ["SIZE_FIRST"]), nt.settings.rank_timeout_s
    nt.configure(rank_timeout_s=60)
    rank_kernels.add_one(cuda.to_device(np.ones(first, np.float32)), cuda.device_array(first))
    nt.configure(rank_timeout_s=timeout_s)
waited = os.environ.get("ARRIVE_AFTER")  # a file: this rank's first tuning comes after it exists
while waited is not None and not os.path.exists(waited):
    time.sleep(0.05)
arrived = time.monotonic()
try:
    rank_kernels.add_one(x, out)
except nt.TuningError as error:
    print(json.dumps({"rank": rank, "error": str(error), "waited_s": time.monotonic() - arrived}))
    sys.exit(0)
finally:
    open(f"done-{rank}", "w").close()
assert out.copy_to_host().tolist() == list(range(1, n + 1))
report = rank_kernels.add_one.tune(x, out)
(stored,) = files.stored_entries(nt.settings.cache_dir)
winner = rank_kernels.add_one._device_state().cache.winners[report.key]
print(json.dumps({"rank": rank, "best": report.best, "measured": sorted(set(measured)),
                  "source": str(winner.report.source), "entry": stored.stored}))
"""


@pytest.fixture
def job(tmp_path):
    (tmp_path / "rank_kernels.py").write_text(textwrap.dedent(KERNELS))
    (tmp_path / "rank.py").write_text(textwrap.dedent(RANK))

    jobs = iter(range(100))

    def run(size, caches=None, sizes=None, timeout_s=20, **environment):
        """Start ``size`` ranks; each one's last line of output, read as JSON."""
        started, rendezvous = [], tmp_path / f"rendezvous-{next(jobs)}"  # one file per job
        for rank in range(size):
            env = {
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": str(size),
                "RENDEZVOUS": str(rendezvous),
                "NUMBATUNE_CACHE_DIR": str((caches or {}).get(rank, tmp_path / f"cache-{rank}")),
                "NUMBATUNE_RANK_TIMEOUT_S": str(timeout_s),
                "SIZE": str((sizes or {}).get(rank, 64)),
                **environment.get(f"rank_{rank}", {}),
                **{k: v for k, v in environment.items() if not k.startswith("rank_")},
            }
            started.append(
                subprocess.Popen(
                    [sys.executable, "rank.py"],
                    cwd=tmp_path,
                    env=env,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        outputs = [process.communicate(timeout=240) for process in started]
        return [
            json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {"died": stderr}
            for stdout, stderr in outputs
        ]

    return run


def test_ranks_split_the_variants_and_store_the_same_entry(job):
    size = 4  # (the tests below split among two)
    ranks = job(size)
    assert all("entry" in r for r in ranks), ranks
    measured = [r["measured"] for r in ranks]
    assert sum(len(m) for m in measured) == 8  # every variant measured once, by one rank
    assert all(len(m) == 8 // size for m in measured)
    assert len({json.dumps(r["entry"], sort_keys=True) for r in ranks}) == 1
    assert len({json.dumps(r["best"]) for r in ranks}) == 1
    assert {r["source"] for r in ranks} == {"ranks"}


def test_a_share_that_fails_entirely_is_kept_as_failed_and_not_tuned_again(job):
    """Rank 1's share (BLOCK 2, 8, 32, 128) fails entirely: the merged entry records its
    variants as failed, so the next job serves the key from the cache."""
    failing = {"FAIL_BLOCKS": "2,8,32,128"}
    ranks = job(2, **failing)
    assert all("entry" in r for r in ranks), ranks
    assert ranks[0]["entry"] == ranks[1]["entry"]
    results = {r["variant"]: r["status"] for r in ranks[0]["entry"]["results"]}
    assert len(results) == 8
    assert {v for v, status in results.items() if status == "failed"} == {
        f"BLOCK={block}" for block in (2, 8, 32, 128)
    }
    assert ranks[0]["best"]["BLOCK"] in (1, 4, 16, 64)
    again = job(2, **failing)
    assert [r["measured"] for r in again] == [[], []], again
    assert [r["best"] for r in again] == [ranks[0]["best"]] * 2


def test_a_rank_with_a_stored_result_gives_it_to_the_others(job, tmp_path):
    first = job(1, caches={0: tmp_path / "tuned"})  # a job of one rank tunes alone
    ranks = job(2, caches={0: tmp_path / "tuned", 1: tmp_path / "empty"})
    assert all("entry" in r for r in [*first, *ranks]), [first, ranks]
    assert [r["measured"] for r in ranks] == [[], []]
    assert ranks[0]["best"] == ranks[1]["best"] == first[0]["best"]
    assert ranks[1]["entry"] == ranks[0]["entry"]


def test_ranks_with_other_keys_tune_them_apart(job):
    ranks = job(2, sizes={0: 64, 1: 1000})
    assert [len(r["measured"]) for r in ranks] == [8, 8]
    assert ranks[0]["entry"]["key"] != ranks[1]["entry"]["key"]


def test_a_rank_that_dies_makes_the_others_fail_with_a_clear_error(job):
    ranks = job(2, timeout_s=5, DIE_WHILE_TUNING="1")
    assert "died" in ranks[1]
    assert "could not tune key" in ranks[0]["error"]
    assert "a rank died or did not reach this tuning" in ranks[0]["error"]


@pytest.mark.parametrize("tuning", ["first", "second"])
def test_a_rank_that_comes_late_to_a_tuning_makes_every_rank_fail_within_the_timeout(job, tuning):
    """Rank 1 reaches the tuning only once rank 0 has given up waiting for it."""
    timeout_s = 3
    ranks = job(2, timeout_s=timeout_s, rank_1={"ARRIVE_AFTER": "done-0"},
                SIZE_FIRST="8" if tuning == "second" else "")  # fmt: skip
    for rank in ranks:
        assert "a rank died or did not reach this tuning" in rank.get("error", ""), ranks
        assert rank["waited_s"] < timeout_s + 5, ranks
