"""Worker processes: results in order, errors reported, dead and late workers replaced."""

import os
import subprocess
import sys
import threading
import time

import pytest

from numbatune import processes
from numbatune.arrays import SIMULATOR
from numbatune.processes import Done, Lost, Raised, Task, WorkerPool

pytestmark = pytest.mark.skipif(not processes.available(), reason="worker processes need POSIX")


@pytest.fixture(params=["fresh", "forked"])
def pool(request):
    """A pool of fresh workers, or of workers forked from a server that ran a warm task."""
    environment = processes.environment(simulator=SIMULATOR)
    warm = Task("tests.workers", "warm", ()) if request.param == "forked" else None
    pool = WorkerPool(2, environment, warm=warm)
    yield pool
    pool.close()


def task(name, *args):
    return Task("tests.workers", name, args)


def test_results_come_back_in_the_order_of_the_tasks(pool):
    outcomes = pool.run([task("square", n) for n in range(6)], limit_s=60)
    assert outcomes == [Done(n * n) for n in range(6)]


def test_a_task_that_raises_reports_its_error_and_the_worker_goes_on(pool):
    raised, done = pool.run([task("fail", "no good"), task("square", 3)], limit_s=60)
    assert isinstance(raised, Raised) and str(raised) == "ValueError: no good"
    assert "Traceback" in raised.details
    assert done == Done(9)


def test_a_task_holding_a_class_of_the_parents_script_is_reported_and_the_worker_goes_on(
    pool, monkeypatch
):
    """A named tuple class of the user's script (``__main__``), in a compile task's argument
    types: the worker cannot import it; it says so (the parent compiles the kernel itself)."""
    script_class = type("ScriptPoint", (), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "ScriptPoint", script_class, raising=False)
    unreadable, done = pool.run([task("square", script_class), task("square", 3)], limit_s=60)
    assert isinstance(unreadable, Raised) and unreadable.kind == "UnreadableTask"
    assert "ScriptPoint" in unreadable.message
    assert done == Done(9)


def test_a_worker_that_dies_fails_its_task_and_a_fresh_one_takes_the_next(pool):
    died, *rest = pool.run([task("die", 7), task("square", 2), task("square", 5)], limit_s=60)
    assert isinstance(died, Lost) and "died (exit status 7)" in died.reason
    assert rest == [Done(4), Done(25)]


def test_lazy_tasks_are_made_as_workers_take_them_and_one_not_made_fails_alone(pool):
    made, making, overlapped = [], threading.Lock(), []

    def make(index):
        if not making.acquire(blocking=False):
            overlapped.append(index)  # another thread was making one at the same time
            making.acquire()
        try:
            made.append(threading.current_thread().name)
            time.sleep(0.2)  # (widens the window in which another thread could start one)
            if index == 1:
                raise ValueError("cannot make task 1")
            return task("square", index)
        finally:
            making.release()

    outcomes = pool.run(processes.LazyTasks(3, make), limit_s=60)
    assert outcomes[0] == Done(0) and outcomes[2] == Done(4)
    assert isinstance(outcomes[1], Raised) and str(outcomes[1]) == "ValueError: cannot make task 1"
    assert made == ["numbatune-worker"] * 3  # made by the threads that serve the workers
    # One at a time: making a task may not be thread-safe (CPython's compile() of an AST, run
    # when static_range loops are written out, is not).
    assert overlapped == []


def test_a_task_that_cannot_be_pickled_fails_alone_and_every_task_gets_its_outcome(pool):
    finished = []
    outcomes = pool.run(
        [task("square", 2), task("square", threading.Lock()), task("square", 3)],
        limit_s=60,
        done=lambda index, outcome: finished.append(index),
    )
    assert len(outcomes) == 3 and sorted(finished) == [0, 1, 2]
    assert outcomes[0] == Done(4) and outcomes[2] == Done(9)
    assert isinstance(outcomes[1], Raised) and outcomes[1].kind == "TypeError"
    assert "pickle" in outcomes[1].message


@pytest.mark.parametrize("error", [OSError, SystemExit])
def test_a_done_callback_that_raises_stops_no_task_and_its_error_reaches_the_caller(pool, error):
    finished = []

    def done(index, outcome):
        finished.append(index)
        raise error(f"cannot record task {index}")

    with pytest.raises(error, match="cannot record task"):
        pool.run([task("square", n) for n in range(5)], limit_s=60, done=done)
    assert sorted(finished) == [0, 1, 2, 3, 4]  # every task ran and was handed over


def test_a_worker_that_cannot_be_started_fails_its_task_and_the_next_starts_one(monkeypatch):
    popen, starts = subprocess.Popen, []

    def start_but_the_first(*args, **options):
        starts.append(args)
        if len(starts) == 1:
            raise OSError(12, "Cannot allocate memory")
        return popen(*args, **options)

    monkeypatch.setattr(subprocess, "Popen", start_but_the_first)
    pool = WorkerPool(1, processes.environment(simulator=SIMULATOR))
    try:
        failed, done = pool.run([task("square", 2), task("square", 3)], limit_s=60)
    finally:
        pool.close()
    assert isinstance(failed, Raised)
    assert str(failed) == "OSError: [Errno 12] Cannot allocate memory"
    assert done == Done(9)


def test_a_task_past_its_time_limit_is_stopped_and_the_next_runs(pool):
    late, done = pool.run([task("sleep", 30), task("square", 4)], limit_s=1.0)
    assert isinstance(late, Lost) and "time limit of 1 s" in late.reason
    assert done == Done(16)


def test_starting_a_worker_does_not_count_against_the_first_tasks_limit():
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment)
    try:  # numbatune takes longer than 0.5 s to import in a fresh worker
        assert pool.run([task("square", 6)], limit_s=0.5) == [Done(36)]
    finally:
        pool.close()


def test_a_task_that_spoils_its_worker_ends_it_and_the_next_task_gets_a_fresh_one():
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment)  # one worker: the second task would reuse the first's
    try:
        first, second = pool.run([task("spoil"), task("pid")], limit_s=60)
    finally:
        pool.close()
    assert isinstance(first, Raised) and first.ended
    assert isinstance(second, Done) and second.value != first.message


def test_compile_workers_run_at_a_lower_cpu_priority_than_their_parent():
    from numbatune.compile.compiler import worker_environment

    pool = WorkerPool(1, worker_environment())
    try:
        (outcome,) = pool.run([Task("os", "nice", (0,))], 60)
    finally:
        pool.close()
    assert outcome == Done(min(19, os.nice(0) + 10))


def test_a_warm_pools_workers_are_forked_from_the_process_that_ran_the_warm_task(pool):
    outcomes = pool.run([task("warmed_in") for _ in range(4)], limit_s=60)
    for outcome in outcomes:
        warmed_in, parent = outcome.value
        if pool._warm is None:
            assert warmed_in is None
        else:
            assert warmed_in is not None and warmed_in == parent


def test_a_warm_pools_workers_garbage_collections_skip_what_the_server_made(pool):
    (outcome,) = pool.run([task("frozen_objects")], limit_s=60)
    if pool._warm is None:  # as many as the interpreter freezes as it starts, where it does
        started = subprocess.run(
            [sys.executable, "-c", "import gc; print(gc.get_freeze_count())"],
            capture_output=True, text=True, check=True,
            env=processes.environment(simulator=SIMULATOR),
        )  # fmt: skip
        assert outcome.value == int(started.stdout)
    else:
        assert outcome.value > 1000  # numbatune and what it imports, at least


def test_a_prepared_pool_warms_its_fork_server_before_any_worker_is_asked_for(tmp_path):
    told = tmp_path / "warmed"
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment, warm=Task("tests.workers", "warm_and_tell", (str(told),)))
    try:
        pool.prepare()
        deadline = time.monotonic() + 60
        while not told.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        server = int(told.read_text())  # warmed, with no task given
        ((warmed_in, parent),) = [outcome.value for outcome in pool.run([task("warmed_in")], 60)]
        assert warmed_in == parent == server
    finally:
        pool.close()


def test_a_pool_is_not_closed_as_idle_while_a_run_is_under_way():
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment, idle_s=0.5, warm=Task("tests.workers", "warm", ()))
    outcomes = []
    running = threading.Thread(target=lambda: outcomes.extend(pool.run([task("sleep", 3)], 60)))
    try:
        running.start()
        while not pool._running:  # the run has begun
            time.sleep(0.01)
        pool.prepare()  # as a kernel defined meanwhile does: its idle timer must wait
        server = pool._server
        running.join()
        assert outcomes == [Done(3)]
        assert pool._server is server and server.alive()  # not closed under the run
    finally:
        pool.close()


def test_compile_workers_start_with_numba_imported():
    from numbatune.compile.compiler import worker_pool
    from numbatune.compilers import NUMBA_CUDA

    pool = worker_pool(1, NUMBA_CUDA)
    try:
        assert pool.run([task("numba_imported")], limit_s=120) == [Done(True)]
    finally:
        pool.close()


def test_a_warm_task_that_fails_or_a_fork_server_that_dies_leaves_the_pool_working():
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment, warm=Task("tests.workers", "fail", ("warm failed",)))
    try:
        assert pool.run([task("square", 3)], limit_s=60) == [Done(9)]
        pool._server.process.kill()
        pool._server.process.wait()
        pool.close()  # its worker, forked from the dead server, and the server
        assert pool.run([task("square", 4)], limit_s=60) == [Done(16)]
    finally:
        pool.close()


def test_a_worker_not_yet_forked_when_its_start_limit_passes_fails_its_task_alone(monkeypatch):
    environment = processes.environment(simulator=SIMULATOR)
    pool = WorkerPool(1, environment, warm=Task("tests.workers", "sleep", (3600,)))
    monkeypatch.setattr(processes, "START_LIMIT_S", 0.5)  # the server is still warming then
    outcomes = []
    running = threading.Thread(target=lambda: outcomes.extend(pool.run([task("square", 3)], 60)))
    running.start()
    running.join(timeout=60)  # (it waited for the server to fork the worker: an hour)
    still_waiting = running.is_alive()
    pool.close()
    running.join()
    assert not still_waiting
    (late,) = outcomes
    assert isinstance(late, Lost) and "time limit of 0.5 s" in late.reason
