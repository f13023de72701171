"""Variants that crash or hang run first in a separate process and never in the caller's."""

import os
import threading

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import processes
from numbatune.arrays import SIMULATOR, is_array
from numbatune.compile.compiler import Compiler
from numbatune.config import Isolate
from numbatune.trials import runs as trials
from tests.kernels import fill_with, non_blocking_stream, open_gate, wait_for_gate

pytestmark = pytest.mark.skipif(not processes.available(), reason="worker processes need POSIX")

MODE = 0  # 0: correct; 1: loops forever; 2: ends the process; 3: writes far out of bounds;
# 5: writes out of bounds where a's values say (only if the trial sees the caller's values)


@cuda.jit
def fragile(a, out):
    i = cuda.grid(1)
    if MODE == 1:
        while True:
            pass
    if MODE == 2:
        os._exit(3)  # under the simulator, a kernel is Python: this ends its process
    if MODE == 3:
        out[i + (1 << 40)] = 1  # far past any allocation
    if MODE == 5 and i < a.shape[0]:
        out[int(a[i]) << 40] = 1  # a[0] == 0 stays in bounds, a[1] == 1 does not
    if i < a.shape[0]:
        out[i] = a[i] * 2


def _fragile(modes):
    return nt.autotune(
        variants=nt.product(MODE=modes),
        launch=lambda a, out: (nt.cdiv(a.shape[0], 8), 8),
    )(fragile)


@pytest.fixture
def isolated(monkeypatch):
    monkeypatch.setattr(nt.settings, "isolate", Isolate.NEW)
    monkeypatch.setattr(nt.settings, "trial_timeout_s", 5.0)


def _arguments():
    return cuda.to_device(np.arange(16, dtype=np.float32)), cuda.to_device(np.zeros(16, np.float32))


@pytest.mark.skipif(
    not SIMULATOR, reason="the simulator's forms of these failures; on a GPU, below"
)
@pytest.mark.parametrize(
    ("mode", "reason"),
    [(1, "passed the time limit of 5 s"), (2, "died (exit status 3)"), (3, "IndexError")],
    ids=["hangs", "ends its process", "writes out of bounds"],
)
def test_a_variant_that_fails_its_trial_never_runs_here_and_the_others_tune(isolated, mode, reason):
    tuned = _fragile([0, mode])
    a, out = _arguments()
    report = tuned.tune(a, out)
    good, bad = report.results
    assert good.median_s is not None and report.best == {"MODE": 0}
    assert "its trial run in a separate process failed" in bad.error and reason in bad.error
    tuned(a, out)
    assert out.copy_to_host().tolist() == [2.0 * i for i in range(16)]


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's forms of these failures")
def test_variants_run_together_and_one_that_dies_or_hangs_among_them_is_found_at_once(
    isolated, monkeypatch
):
    sent = []
    original = processes.WorkerPool.run

    def counted(self, tasks, limit_s, done=lambda index, outcome: None):
        outcomes = original(self, tasks, limit_s, done)
        for task, outcome in zip(tasks, outcomes, strict=True):
            if task.function == "trial" and getattr(outcome, "kind", "") != "NotStaged":
                sent.append(len(task.args[1]))  # the variants of a task the worker ran
        return outcomes

    # Kernels go to the worker as they are compiled; here each tuning's first trial waits
    # until all are (else the first task would take as many as had come: a race).
    compiled = threading.Event()
    compile_all, session = Compiler.compile_all, trials.Trials.session

    def compile_all_then_tell(self, *args):
        try:
            return compile_all(self, *args)
        finally:
            compiled.set()

    def session_once_all_compiled(self, *args):
        assert compiled.wait(60)
        return session(self, *args)

    monkeypatch.setattr(processes.WorkerPool, "run", counted)
    monkeypatch.setattr(Compiler, "compile_all", compile_all_then_tell)
    monkeypatch.setattr(trials.Trials, "session", session_once_all_compiled)
    a, out = _arguments()
    report = _fragile([0, 4, 6, 7]).tune(a, out)  # modes 4, 6, 7: correct too
    assert sent == [4] and all(r.median_s is not None for r in report.results)
    assert report.trial_s > 0

    sent.clear()
    compiled.clear()
    report = _fragile([8, 9, 2, 10, 11]).tune(a, out)  # mode 2 ends the worker
    assert [r.error is None for r in report.results] == [True, True, False, True, True]
    assert "died (exit status 3)" in report.results[2].error
    assert sent == [5, 2]  # all (the worker says which one died); the rest together

    sent.clear()
    compiled.clear()
    report = _fragile([1, 12, 13]).tune(a, out)  # mode 1 hangs: one time limit, not two
    assert [r.error is None for r in report.results] == [False, True, True]
    assert "passed the time limit of 5 s" in report.results[0].error
    assert sent == [3, 2]


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's form of this failure")
def test_a_trial_runs_on_the_callers_values(isolated):
    report = _fragile([0, 5]).tune(*_arguments())
    assert report.best == {"MODE": 0}
    assert "separate process failed: IndexError" in report.results[1].error


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a,
        lambda a: cuda.to_device(np.asfortranarray(a.copy_to_host())),
        lambda a: a[::2, 1:],
    ],
    ids=["C order", "Fortran order", "strided"],
)
def test_arguments_reach_the_trial_worker_as_the_caller_passed_them(view):
    array = view(cuda.to_device(np.arange(48, dtype=np.float64).reshape(6, 8)))
    host = array.copy_to_host()
    args = (array, np.float32(2.5), cuda.to_device(np.zeros(0, np.int8)))
    with trials._shared_copies(args, cuda.default_stream()) as (path, layout):
        trials.stage("token", path, layout)  # what the worker does, here
    staged, originals = trials._staged["args"], trials._staged["originals"]
    assert staged[1] == np.float32(2.5) and staged[2].shape == (0,) and originals[1] is None
    for copy in (staged[0], originals[0]):
        assert np.array_equal(copy.copy_to_host(), host)


@pytest.mark.gpu
def test_a_trial_takes_the_arguments_after_the_callers_stream_wrote_them():
    import threading

    stream = cuda.external_stream(non_blocking_stream())  # the legacy stream does not wait for it
    gate, x = cuda.to_device(np.zeros(1, np.int32)), cuda.to_device(np.zeros(256, np.float32))
    other = cuda.external_stream(non_blocking_stream())
    # Loaded first: loading a kernel may wait for the whole device (CUDA's lazy loading).
    open_gate[1, 1, other](cuda.device_array(1, np.int32))
    fill_with[1, 256, other](cuda.device_array(256, np.float32), 0.0)
    cuda.synchronize()
    wait_for_gate[1, 1, stream](gate)
    fill_with[1, 256, stream](x, 6.0)  # pending on the caller's stream until the gate opens
    opener = threading.Timer(2.0, lambda: open_gate[1, 1, other](gate))  # a moment from now
    opener.start()
    with trials._shared_copies((x,), stream) as (path, layout):
        trials.stage("token", path, layout)
    opener.join()
    assert np.all(trials._staged["args"][0].copy_to_host() == 6.0)


def test_a_variant_that_ran_is_not_tried_again_but_all_tries_every_time(isolated, monkeypatch):
    tried, sessions = [], []
    run, session = trials.Session.run, trials.Session.__init__

    def counted_run(self, kernels):
        tried[-1] += len(kernels)
        return run(self, kernels)

    def counted_session(self, *args):
        sessions[-1] += 1
        session(self, *args)

    monkeypatch.setattr(trials.Session, "run", counted_run)
    monkeypatch.setattr(trials.Session, "__init__", counted_session)
    tuned = _fragile([0, 4])  # MODE=4: correct too
    a, out = _arguments()
    for force, isolate in [(False, Isolate.NEW), (True, Isolate.NEW), (True, Isolate.ALL)]:
        monkeypatch.setattr(nt.settings, "isolate", isolate)
        tried.append(0)
        sessions.append(0)
        tuned.tune(a, out, force=force)
    assert tried == [2, 0, 2]
    # With nothing to try, the arguments are not even given to the worker (nor copied).
    assert sessions == [1, 0, 1]


def test_a_compiled_kernel_is_tried_while_the_others_still_compile(isolated, monkeypatch):
    tried, waited = threading.Event(), []
    run, compile_all = trials.Session.run, Compiler.compile_all

    def noted_run(self, kernels):
        tried.set()
        return run(self, kernels)

    def compile_all_waiting_after_the_first(self, variants, args, done, tally, ready, taken):
        def ready_then_wait(members, made):
            ready(members, made)
            if not waited:  # the next kernel "compiles" until the first one's trial starts
                waited.append(tried.wait(30))

        return compile_all(self, variants, args, done, tally, ready_then_wait, taken)

    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)  # tried even if run before
    monkeypatch.setattr(trials.Session, "run", noted_run)
    monkeypatch.setattr(Compiler, "compile_all", compile_all_waiting_after_the_first)
    report = _fragile([0, 4]).tune(*_arguments())
    assert waited == [True]
    assert report.source == "benchmark" and not any(
        r.status is nt.Status.FAILED for r in report.results
    )


def test_a_kernel_compiled_here_for_several_signatures_is_given_to_its_trial_once(monkeypatch):
    from numbatune.compile import compiler
    from numbatune.compile.compiler import Tally, _Settled

    tuned = _fragile([0])
    members = tuned.variants
    first, second = ("float32[:]", "float32[:]"), ("float64[:]", "float64[:]")
    monkeypatch.setattr(compiler, "compile_pool", lambda kernels, size: None)  # compiled here
    monkeypatch.setattr(Compiler, "compiled", lambda self, *given: "kernel")
    ready = []
    settled = _Settled({}, lambda count: None, lambda *given: ready.append(given), first)
    # The kernel misses two declared signatures: one compile here makes both.
    waiting = [(members, first), (members, second)]
    tuned._compiler._compile_waiting(waiting, (), settled, Tally(), nt.settings.snapshot())
    assert ready == [(members, True)] and settled.results == dict.fromkeys(members, "kernel")


def test_a_tuning_interrupted_while_compiling_leaves_the_trial_worker_to_the_next(
    isolated, monkeypatch
):
    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)
    compile_all = Compiler.compile_all

    def interrupted_after_the_first(self, variants, args, done, tally, ready, taken):
        handed = []  # (on a GPU, kernels compiled in workers are handed over from a thread)
        compile_all(self, variants, args, done, tally, lambda *given: handed.append(ready(*given)),
                    taken)  # fmt: skip
        assert handed  # kernels went to their trials...
        raise KeyboardInterrupt  # ...and the tuning's thread is interrupted, as by a Ctrl-C

    with monkeypatch.context() as patch:
        patch.setattr(Compiler, "compile_all", interrupted_after_the_first)
        with pytest.raises(KeyboardInterrupt):
            _fragile([0, 4]).tune(*_arguments())
    # Had the first kernel's trial session been left open, this would wait for it forever.
    outcome = []
    tuning = threading.Thread(target=lambda: outcome.append(_fragile([0, 4]).tune(*_arguments())))
    tuning.start()
    tuning.join(60)
    assert not tuning.is_alive() and outcome[0].source == "benchmark"


def test_arguments_that_cannot_be_shared_in_place_reach_the_worker_through_the_host(
    isolated, monkeypatch
):
    from tests.workers import UnopenableHandle

    copies, copy = [], trials._shared_copies
    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)
    monkeypatch.setattr(
        trials,
        "_shared_in_place",
        lambda args: tuple(
            trials._OpenedByIpc(UnopenableHandle()) if is_array(a) else a for a in args
        ),
    )
    monkeypatch.setattr(trials, "_shared_copies", lambda *a: copies.append(1) or copy(*a))
    report = _fragile([0, 4]).tune(*_arguments())
    assert copies == [1]  # the worker refused the handles: the host copies went instead
    assert not any(r.status is nt.Status.FAILED for r in report.results)


@pytest.mark.gpu
def test_on_a_gpu_arguments_reach_the_worker_from_device_memory_with_their_values(
    isolated, monkeypatch
):
    copies, copy = [], trials._shared_copies
    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)
    monkeypatch.setattr(trials, "_shared_copies", lambda *a: copies.append(1) or copy(*a))
    report = _fragile([0, 5]).tune(*_arguments())  # MODE=5 fails only on the caller's values
    assert copies == []  # no host copy: the worker copied the arrays by CUDA IPC
    (failed,) = [r for r in report.results if r.status is nt.Status.FAILED]
    assert failed.params["MODE"] == 5 and "ILLEGAL_ADDRESS" in failed.outcome.error


def test_without_isolation_no_trial_runs(monkeypatch):
    monkeypatch.setattr(nt.settings, "isolate", Isolate.OFF)
    monkeypatch.setattr(trials.Session, "run", lambda *a: pytest.fail("a trial ran"))
    assert _fragile([0, 4]).tune(*_arguments()).trial_s == 0


@pytest.mark.gpu
@pytest.mark.parametrize(("mode", "reason"), [(3, "ILLEGAL_ADDRESS"), (1, "time limit")])
def test_on_a_gpu_a_crashing_or_hanging_variant_leaves_this_process_healthy(isolated, mode, reason):
    tuned = _fragile([0, mode])
    a, out = _arguments()
    report = tuned.tune(a, out)
    assert report.best == {"MODE": 0} and reason in report.results[1].error
    tuned(a, out)
    assert out.copy_to_host().tolist() == [2.0 * i for i in range(16)]
    assert cuda.to_device(np.ones(4)).copy_to_host().sum() == 4  # the context still works


def test_a_tuning_keeps_the_trial_settings_it_began_with(isolated, monkeypatch):
    """``isolate`` and ``trial_timeout_s`` changed while a key is tuned (here by its launch
    function, which runs as the variants compile and are tried) apply to the next tuning."""
    tried, changing = [], []
    run = trials.Session.run

    def counted_run(self, kernels):
        tried.extend(kernels)
        return run(self, kernels)

    def launch(a, out):
        if changing:  # trials of variants that ran before would be skipped, or time out
            nt.configure(isolate="new", trial_timeout_s=0.001)
        return nt.cdiv(a.shape[0], 8), 8

    monkeypatch.setattr(nt.settings, "isolate", Isolate.ALL)  # tried even if run before
    monkeypatch.setattr(trials.Session, "run", counted_run)
    tuned = nt.autotune(variants=nt.product(MODE=[0, 4]), launch=launch)(fragile)
    a, out = _arguments()
    tuned.tune(a, out)  # both variants run: they have run, for isolate="new"
    tried.clear()
    changing.append(True)
    report = tuned.tune(a, out, force=True)
    assert len(tried) == 2 and all(r.error is None for r in report.results)
    assert (nt.settings.isolate, nt.settings.trial_timeout_s) == (Isolate.NEW, 0.001)


class _DriverError(RuntimeError):
    """A driver error as numba-cuda raises it: with the driver's code."""

    def __init__(self, code):
        super().__init__(f"[{code}] cuLaunchKernel failed")
        self.code = code


@pytest.mark.parametrize(("code", "worker_ends"), [(701, False), (1, False), (700, True)])
def test_a_launch_the_driver_refused_lets_the_trial_worker_go_on_to_the_next_kernel(
    monkeypatch, tmp_path, code, worker_ends
):
    """Too many registers for a block (701) or a configuration out of range (1) is refused
    before anything runs: the worker keeps its context and tries the next kernels (it ended,
    and was started again, for each such variant: 8 of softmax's on numba-cuda-mlir cost 10.9 s
    of trial runs). A fault in a kernel (700) still ends it."""
    ran = []

    def run_once(kernel, config, target):
        if kernel == b"refused":
            raise _DriverError(code)
        ran.append(kernel)

    monkeypatch.setitem(trials._staged, "token", "token")
    monkeypatch.setattr(trials, "_run_once", run_once)
    progress = tmp_path / "progress"
    progress.write_bytes(bytes(64))
    kernels = [(b"first", (1, 1)), (b"refused", (1, 1)), (b"last", (1, 1))]
    outcome = trials.trial("token", kernels, None, str(progress))
    if worker_ends:
        assert isinstance(outcome, processes.Done) and outcome.ended
        assert outcome.value == [None, f"_DriverError: [{code}] cuLaunchKernel failed"]
        assert ran == [b"first"]
    else:
        assert outcome == [None, f"_DriverError: [{code}] cuLaunchKernel failed", None]
        assert ran == [b"first", b"last"]


class _KernelError(Exception):
    """What a debug kernel raises (no driver error code)."""


def test_on_a_gpu_a_kernel_that_raises_its_own_exception_in_its_trial_ran(monkeypatch, tmp_path):
    """A debug kernel's ``raise`` leaves the worker's context as it was: the kernel ran (the
    caller's process runs it, and raises the exception itself, as numba does), and the next
    kernels run in the same worker."""

    def run_once(kernel, config, target):
        if kernel == b"raises":
            raise _KernelError("from the kernel")

    monkeypatch.setattr(trials, "SIMULATOR", False)  # (the simulator's faults raise so too)
    monkeypatch.setitem(trials._staged, "token", "token")
    monkeypatch.setattr(trials, "_run_once", run_once)
    progress = tmp_path / "progress"
    progress.write_bytes(bytes(64))
    kernels = [(b"first", (1, 1)), (b"raises", (1, 1)), (b"last", (1, 1))]
    assert trials.trial("token", kernels, None, str(progress)) == [None, None, None]
