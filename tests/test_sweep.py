"""Record, then sweep: a program records the keys it meets; ``numbatune sweep`` tunes them, on
worker processes or Ray actors, into one export that makes every recorded key a hit."""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest.mock
from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda

from numbatune import cli, record, sweep
from numbatune.arrays import SIMULATOR
from numbatune.cache import compiled, disk, files

KERNELS = """
import os

import numbatune as nt
from numba import cuda

BLOCK = 4


def launch(x, out, a, *, BLOCK):
    if os.environ.get("SWEEP_DIES_AT") == str(x.shape[0]):  # a worker that dies at this key
        os._exit(9)
    return nt.cdiv(x.shape[0], BLOCK), BLOCK


@nt.autotune(variants=nt.product(BLOCK=[2, 4, 8]), launch=launch)
@cuda.jit
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]
"""

PROGRAM = """
import json, sys
import numpy as np
import numbatune as nt
from numba import cuda
import sweep_kernels

if len(sys.argv) > 1:
    nt.cache_import(sys.argv[1])
reports = []
for n in (16, 40, 100):
    x = cuda.to_device(np.ones(n, np.float32))
    out = cuda.device_array(n, np.float32)
    sweep_kernels.scale(x, out, np.float32(3.0))
    assert out.copy_to_host().tolist() == [3.0] * n
    reports.append(str(sweep_kernels.scale.tune(x, out, np.float32(3.0)).source))
print(json.dumps({"sources": reports, "stats": sweep_kernels.scale.stats}))
"""


@pytest.fixture
def program(tmp_path):
    (tmp_path / "sweep_kernels.py").write_text(textwrap.dedent(KERNELS))
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    return tmp_path


#: A Ray cluster on this machine that says it has one GPU (under the simulator no actor uses
#: it), its address printed, kept up until this program's input closes.
CLUSTER = """
import sys, ray
ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module", autouse=True)
def ray_without_tokens():
    """This module's Ray clusters and jobs, without token authentication: a job connecting by
    address uses none unless its process started a cluster before (which turns it on for the
    process), and a cluster started meanwhile may write a new token over the one another's
    jobs read (~/.ray/auth_token)."""
    with unittest.mock.patch.dict(os.environ, {"RAY_AUTH_MODE": "disabled"}):
        yield


@pytest.fixture(scope="module")
def ray_cluster(ray_without_tokens):
    """The address of a Ray cluster this module's Ray tests share: each connects a job of its
    own (with the environment variables its actors read) and leaves the cluster up, which
    costs far less than starting one."""
    pytest.importorskip("ray", reason="Ray is the optional extra numbatune[ray]")
    head = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield head.stdout.readline().strip()
    finally:
        head.stdin.close()
        head.wait(timeout=120)


@contextlib.contextmanager
def ray_job(address, **environment):
    """A job of this process on the cluster at ``address``, its actors given ``environment``."""
    import ray

    ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": environment})
    try:
        yield
    finally:
        ray.shutdown()


def run_program(folder, cache, *arguments, **environment):
    done = subprocess.run(
        [sys.executable, "program.py", *map(str, arguments)],
        cwd=folder,
        env={**os.environ, "NUMBATUNE_CACHE_DIR": str(cache), **environment},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def recorded(program):
    """Run the program once with a record, and return the record's path."""
    path = program / "keys.jsonl"
    run_program(program, program / "cache-recording", NUMBATUNE_RECORD=str(path))
    return path


@pytest.mark.parametrize("engine", ["workers", "ray"])
def test_a_sweep_of_recorded_keys_makes_them_hits_in_a_fresh_process(program, engine, capsys):
    if engine == "ray":
        pytest.importorskip("ray", reason="Ray is the optional extra numbatune[ray]")
    path = recorded(program)
    assert len(record.read(path).records) == 3
    export = program / "export.json"
    options = ["--ray", "--workers", "2"] if engine == "ray" else ["--workers", "2"]
    status = cli.main(["sweep", str(path), "-o", str(export), "--path", str(program), *options])
    assert status == 0, capsys.readouterr().err
    document = json.loads(export.read_text())
    assert len(document["entries"]) == 3
    workers = 2 if SIMULATOR else min(2, len(cuda.gpus))  # on a GPU machine: one per GPU
    assert f"3 tuned, 0 stored, 0 failed, 0 skipped, over {workers} workers" in (
        capsys.readouterr().err
    )
    fresh = run_program(program, program / "cache-fresh", export)
    assert fresh["sources"] == ["memory", "memory", "memory"]
    assert fresh["stats"]["benchmarks"] == 0


def test_records_that_cannot_be_swept_are_named_and_the_sweep_fails(program, tmp_path):
    path = recorded(program)
    good = record.read(path).records[0]
    lost = record.Record("gone.kernel", "gone", "kernel", None, good.arguments)
    script = record.Record("__main__.k (x.py)", "__main__", "k", None, good.arguments)
    wrong = record.Record(good.function, good.module, good.qualname, "(999,)", good.arguments)
    result = sweep.sweep(
        [good, lost, script, wrong], tmp_path / "export.json", paths=[str(program)]
    )
    statuses = {(o.function, o.key): (o.status, o.detail) for o in result.outcomes}
    assert statuses[good.function, good.key][0] == "tuned"
    assert statuses["gone.kernel", None] == (
        "skipped",
        "cannot import gone: No module named 'gone'",
    )
    assert "a script run as __main__" in statuses["__main__.k (x.py)", None][1]
    assert statuses[good.function, "(999,)"][0] == "failed"
    assert "the rebuilt arguments give key" in statuses[good.function, "(999,)"][1]
    assert not result.complete and result.written.results == 1


def test_records_split_into_shares_keep_a_kernels_keys_together():
    records = [record.Record(f, "m", "q", k, ()) for f in "ab" for k in ("1", "2", "3")]
    shares = sweep.split(records, 2)
    assert [[r.function for r in share] for share in shares] == [["a"] * 3, ["b"] * 3]
    assert [len(s) for s in sweep.split(records, 4)] == [2, 2, 1, 1]
    assert sweep.split(records[:1], 4) == [records[:1]]


def test_sweep_without_a_record_says_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NUMBATUNE_CACHE_DIR", str(tmp_path))
    from numbatune.config import load_environment, settings

    saved = settings.cache_dir
    try:
        load_environment()
        assert cli.main(["sweep", "-o", str(tmp_path / "out.json")]) == 2  # a mistake
    finally:
        settings.cache_dir = saved
    assert f"no record at {tmp_path / 'record.jsonl'}" in capsys.readouterr().err


def test_a_ray_sweep_starts_no_more_actors_than_the_cluster_has_gpus(ray_cluster, program, capsys):
    path = recorded(program)
    export = program / "export.json"
    # The cluster says it has one GPU and two CPUs: a second actor asking for a GPU would wait
    # for ever.
    with ray_job(ray_cluster):
        status = cli.main(["sweep", str(path), "-o", str(export), "--path", str(program),
                           "--ray", "--workers", "2"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert "3 tuned, 0 stored, 0 failed, 0 skipped, over 1 workers" in capsys.readouterr().err


def test_a_sweep_whose_worker_dies_keeps_what_it_tuned_and_a_rerun_goes_on_from_there(
    program, tmp_path, monkeypatch, capsys
):
    path = recorded(program)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    export = program / "export.json"
    command = ["sweep", str(path), "-o", str(export), "--path", str(program)]
    monkeypatch.setenv("SWEEP_DIES_AT", "40")  # the last of the worker's three keys
    assert cli.main(command) == 1
    assert "2 tuned, 0 stored, 1 failed" in capsys.readouterr().err
    assert len(json.loads(export.read_text())["entries"]) == 2
    assert list(temporary.iterdir()) == []
    monkeypatch.delenv("SWEEP_DIES_AT")
    assert cli.main(command) == 0
    assert "1 tuned, 2 stored, 0 failed" in capsys.readouterr().err
    assert len(json.loads(export.read_text())["entries"]) == 3
    assert list(temporary.iterdir()) == []


def test_a_sweep_of_records_without_keys_whose_worker_dies_says_what_it_tuned(
    program, monkeypatch, capsys
):
    """Records written by hand name no key: the keys the worker tuned before it died are
    reported tuned, as the export holds them."""
    path = recorded(program)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    by_size = {line["arguments"][0]["shape"][0]: line for line in lines}
    keyless = [{k: v for k, v in by_size[n].items() if k != "key"} for n in (16, 100, 40)]
    path.write_text("".join(json.dumps(line) + "\n" for line in keyless))
    export = program / "export.json"
    monkeypatch.setenv("SWEEP_DIES_AT", "40")  # the last of the worker's three keys
    assert cli.main(["sweep", str(path), "-o", str(export), "--path", str(program)]) == 1
    assert "2 tuned, 0 stored, 1 failed" in capsys.readouterr().err
    assert len(json.loads(export.read_text())["entries"]) == 2


@pytest.mark.parametrize("actor", ["on this machine", "on another machine"])
def test_a_ray_sweep_whose_actor_dies_keeps_what_it_tuned(
    actor, ray_cluster, program, capsys, monkeypatch
):
    path = recorded(program)
    export = program / "export.json"
    if actor == "on another machine":

        @contextlib.contextmanager
        def elsewhere(prefix=None):  # the sweep's folder, which the actor cannot see
            yield str(program / "not-on-the-actors-machine" / f"{prefix}folder")

        monkeypatch.setattr(tempfile, "TemporaryDirectory", elsewhere)
    with ray_job(ray_cluster, SWEEP_DIES_AT="40"):  # the last of the one actor's three keys
        status = cli.main(["sweep", str(path), "-o", str(export), "--path", str(program), "--ray"])
    said = capsys.readouterr().err.splitlines()  # (and Ray's lines)
    [summary] = [line for line in said if line.startswith("numbatune sweep:")]
    assert status == 1 and "2 tuned, 0 stored, 1 failed" in summary, summary
    assert len(json.loads(export.read_text())["entries"]) == 2


class _Call:
    """A call of a fake Ray actor: its actor and record (None: its close)."""

    def __init__(self, actor, record):
        self.actor, self.record = actor, record


class _FakeRay:
    """As much of Ray as the sweep uses, its actors' calls run when their results are asked
    for; ``events`` records each actor's calls handed out and results received."""

    def __init__(self):
        self.events = []

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"GPU": 2}

    def remote(self, **options):
        return lambda cls: SimpleNamespace(remote=lambda *arguments: self._actor(arguments[3]))

    def _actor(self, name):
        def tune(record):
            self.events.append((name, "handed", record.key))
            return _Call(name, record)

        def close():
            return _Call(name, None)

        return SimpleNamespace(
            tune=SimpleNamespace(remote=tune), close=SimpleNamespace(remote=close)
        )

    def wait(self, calls, num_returns, timeout):
        return calls[:num_returns], calls[num_returns:]

    def get(self, call, timeout=None):
        record = call.record
        if record is None:
            return None
        self.events.append((call.actor, "received", record.key))
        outcome = sweep.SweepOutcome(record.function, record.key, sweep.Status.TUNED, "v")
        return {"outcomes": [outcome], "items": [], "kernels": []}


def test_a_ray_actor_is_handed_its_next_key_once_the_last_ones_results_are_here(monkeypatch):
    """A Ray actor that dies right after a key takes that key's reply with it where its next
    call was already queued (Ray loses the reply of a call whose actor exits before sending
    it); handed one key at a time, the actors working side by side, none is lost."""
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    records = [record.Record(f"m.k{n}", "m", f"k{n}", f"({n},)", []) for n in range(4)]
    shares = sweep._on_ray(records, ["m"], [], None, 2, [])
    assert sorted(o.key for share in shares for o in share["outcomes"]) == [r.key for r in records]
    for worker in {name for name, _, _ in fake.events}:
        steps = [step for name, step, _ in fake.events if name == worker]
        assert steps == ["handed", "received"] * (len(steps) // 2), steps
    assert fake.events[0][1] == fake.events[1][1] == "handed"  # both actors at work at once


def test_a_ray_actor_reads_each_stored_result_once_over_its_records(program, monkeypatch):
    arrays = [record.describe(cuda.to_device(np.ones(n, np.float32))) for n in (8, 16, 32, 64)]
    lines = [_line([x, x, record.describe(np.float32(2))]) for x in arrays]
    (program / "keys.jsonl").write_text("\n".join(lines) + "\n")
    records = record.read(program / "keys.jsonl").records
    actor = sweep.Sweeper(["sweep_kernels"], [str(program)], [], str(program / "sweep" / "w0"))
    read, reading = [], files._read
    monkeypatch.setattr(files, "_read", lambda *a: read.append(a[2]) or reading(*a))
    handed = [actor.tune(r) for r in records]
    assert [len(h["items"]) for h in handed] == [1, 1, 1, 1]
    assert len(read) == len(set(read)) == 4  # each key's result read once, not all at each key
    actor.close()


def test_a_ray_actor_that_cannot_prepare_removes_the_folder_it_made(program, monkeypatch):
    temporary = program / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    elsewhere = str(program / "not-on-the-actors-machine" / "worker-0")
    with pytest.raises(ModuleNotFoundError):
        sweep.Sweeper(["no_such_module_here"], [str(program)], [], elsewhere)
    assert list(temporary.iterdir()) == []


LEVELS = """
import os

import numbatune as nt
from numba import cuda


@nt.autotune(
    variants=nt.product(BLOCK=[2, 4, 8], priority=lambda BLOCK: 0 if BLOCK == 8 else 1),
    launch=lambda x, out, a, *, BLOCK: (nt.cdiv(x.shape[0], BLOCK), BLOCK),
    level=os.environ["SWEEP_LEVEL"],
)
@cuda.jit
def scale(x, out, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i]
"""


def test_a_ray_sweep_exports_a_key_tuned_again_over_the_earlier_exports_entry(
    ray_cluster, program, capsys
):
    (program / "levels_kernels.py").write_text(LEVELS)
    x = record.describe(cuda.to_device(np.ones(8, np.float32)))
    line = _line([x, x, record.describe(np.float32(2))], function="levels_kernels.scale")
    (program / "keys.jsonl").write_text(line + "\n")
    export = program / "export.json"
    command = ["sweep", str(program / "keys.jsonl"), "-o", str(export), "--path", str(program),
               "--ray"]  # fmt: skip
    for level in ("minimal", "full"):  # full measures the variant minimal left out: tuned again
        with ray_job(ray_cluster, SWEEP_LEVEL=level):
            assert cli.main(command) == 0, capsys.readouterr().err
    [entry] = json.loads(export.read_text())["entries"]
    assert len(entry["entry"]["results"]) == 3  # not the earlier export's two


def _line(arguments, function="sweep_kernels.scale"):
    return json.dumps({"format": 1, "function": function, "module": function.rpartition(".")[0],
                       "qualname": "scale", "arguments": arguments})  # fmt: skip


def test_a_sweep_replays_reversed_and_broadcast_arrays_and_names_a_line_cut_short(program, capsys):
    x, a = cuda.to_device(np.ones(8, np.float32)), record.describe(np.float32(2))
    out = record.describe(cuda.device_array(8, np.float32))
    reversed_x = record.describe(x[::-1])
    broadcast_x = {"shape": [16], "strides": [0], "dtype": "float32"}  # another key
    lines = [_line([reversed_x, out, a]), _line([broadcast_x, {**out, "shape": [16]}, a]),
             _line([record.describe(x), out, a])[:50]]  # fmt: skip
    (program / "keys.jsonl").write_text("\n".join(lines) + "\n")
    export = program / "export.json"
    command = ["sweep", str(program / "keys.jsonl"), "-o", str(export), "--path", str(program)]
    assert cli.main([*command, "--json"]) == 1  # not every line was swept
    rows = json.loads(capsys.readouterr().out)
    assert [(row["function"], row["status"]) for row in rows] == [
        ("line 3", "skipped"), ("sweep_kernels.scale", "tuned"), ("sweep_kernels.scale", "tuned")
    ]  # fmt: skip
    assert "not a numbatune record" in rows[0]["detail"]
    assert len(json.loads(export.read_text())["entries"]) == 2


@pytest.mark.parametrize("output", ["a folder", "a missing folder", "a full disk"])
def test_a_sweep_whose_output_cannot_be_written_fails_before_tuning(
    program, monkeypatch, capsys, output
):
    x = record.describe(cuda.to_device(np.ones(8, np.float32)))
    (program / "keys.jsonl").write_text(_line([x, x, record.describe(np.float32(2))]) + "\n")
    path = {"a folder": program, "a missing folder": program / "missing" / "export.json",
            "a full disk": program / "export.json"}[output]  # fmt: skip
    if output == "a full disk":
        monkeypatch.setattr(disk.os, "statvfs", lambda _: SimpleNamespace(f_bavail=0, f_frsize=1))
    tuned = []
    monkeypatch.setattr(sweep, "_on_this_machine", lambda *arguments: tuned.append(1) or [])
    command = ["sweep", str(program / "keys.jsonl"), "-o", str(path), "--path", str(program)]
    assert cli.main(command) == 2
    said = capsys.readouterr().err
    assert tuned == [] and "Traceback" not in said
    words = {"a folder": "is a folder", "a missing folder": "no folder",
             "a full disk": "the disk is full"}[output]  # fmt: skip
    assert words in said, said


def test_a_ray_sweep_without_ray_says_in_one_line_what_to_install(program, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    x = record.describe(cuda.to_device(np.ones(8, np.float32)))
    (program / "keys.jsonl").write_text(_line([x, x, record.describe(np.float32(2))]) + "\n")
    export = program / "export.json"
    command = ["sweep", str(program / "keys.jsonl"), "-o", str(export), "--ray"]
    assert cli.main(command) == 2
    [said] = capsys.readouterr().err.strip().splitlines()
    assert said == ("numbatune: error: numbatune sweep --ray needs Ray, which is not installed: "
                    "pip install 'numbatune[ray]'")  # fmt: skip
    assert not export.exists()


def test_a_rerun_sweep_keeps_the_kernels_of_the_export_it_goes_on_from(program, capsys):
    x = record.describe(cuda.to_device(np.ones(8, np.float32)))
    (program / "keys.jsonl").write_text(_line([x, x, record.describe(np.float32(2))]) + "\n")
    export = program / "export.json"
    earlier = compiled.Kernel("sm_90", "sweep_kernels.scale", "ab" * 20, b"a compiled kernel")
    files.write_export(export, [], [earlier])
    command = ["sweep", str(program / "keys.jsonl"), "-o", str(export), "--path", str(program)]
    assert cli.main(command) == 0, capsys.readouterr().err
    assert earlier in files.read_export(export).kernels
    assert cli.main([*command, "--no-kernels"]) == 0
    assert "1 stored, 0 failed" in (said := capsys.readouterr().err)
    assert "1 stored results and 0 compiled kernels" in said
    assert files.read_export(export).kernels == []


@pytest.mark.gpu
@pytest.mark.parametrize("route", ["sweep", "cache export"])
def test_a_shipped_export_launches_every_key_in_a_fresh_process_with_no_compile(
    program, route, capsys
):
    """The user's story: keys tuned in one cache, shipped in an export (a sweep's, or the
    cache's), imported into a fresh cache by a fresh process, whose every call is a hit that
    loads its winner's kernel and compiles nothing."""
    path = recorded(program)  # the program ran, tuning its three keys into cache-recording
    export = program / "export.json"
    if route == "sweep":
        status = cli.main(["sweep", str(path), "-o", str(export), "--path", str(program)])
    else:
        status = subprocess.run(
            [sys.executable, "-m", "numbatune", "cache", "export", str(export)],
            env={**os.environ, "NUMBATUNE_CACHE_DIR": str(program / "cache-recording")},
            timeout=300,
        ).returncode
    assert status == 0, capsys.readouterr().err
    major, minor = cuda.get_current_device().compute_capability
    assert f"sm_{major}{minor}" in {k.arch for k in files.read_export(export).kernels}
    fresh = run_program(program, program / "cache-fresh", export)
    assert fresh["sources"] == ["memory", "memory", "memory"]
    stats = fresh["stats"]
    assert (stats["benchmarks"], stats["compiles"]) == (0, 0) and stats["loaded"] > 0, stats


TUNED_UNDER_TWO_CACHES = """
import sys
import numpy as np
import numbatune as nt
from numba import cuda
import sweep_kernels

x, out = cuda.to_device(np.ones(16, np.float32)), cuda.device_array(16, np.float32)
for cache in sys.argv[1:]:
    nt.configure(cache_dir=cache)
    sweep_kernels.scale.tune(x, out, np.float32(3.0))
"""


@pytest.mark.gpu
def test_an_export_of_a_cache_tuned_after_another_makes_a_fresh_process_compile_nothing(program):
    """A process that tuned a kernel under one cache directory, then under another (its
    kernels compiled already, in memory), keeps them in the second's kernel store too: an
    export of the second carries them, and a fresh process that imports it compiles nothing."""
    (program / "two_caches.py").write_text(TUNED_UNDER_TWO_CACHES)
    first, second = program / "cache-first", program / "cache-second"
    subprocess.run([sys.executable, "two_caches.py", first, second], cwd=program, check=True)
    export = program / "export.json"
    subprocess.run(
        [sys.executable, "-m", "numbatune", "cache", "export", str(export)],
        env={**os.environ, "NUMBATUNE_CACHE_DIR": str(second)},
        check=True,
    )
    assert files.read_export(export).kernels
    fresh = run_program(program, program / "cache-fresh", export)
    assert fresh["sources"][0] == "memory"  # (the export has the first key only)
    assert fresh["stats"]["compiles"] == 0 and fresh["stats"]["loaded"] > 0, fresh["stats"]
