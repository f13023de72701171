"""The package's one fork hook: locks and per-process values a forked child gets anew."""

import os
import threading

import pytest

import numbatune as nt
from numbatune import background
from numbatune.forking import ForkSafeLock, PerProcess

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(check) -> int:
    """Fork, run ``check()`` in the child (True: exit status 0), and return the status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if check() else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_lock_another_thread_holds_at_the_fork_is_free_in_the_child():
    lock = ForkSafeLock()
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    try:
        assert not lock.acquire(blocking=False)
        assert _in_child(lambda: lock.acquire(blocking=False)) == 0
    finally:
        release.set()
        thread.join()


def test_a_per_process_value_is_made_again_in_a_forked_child():
    made = []
    values = PerProcess()
    parent = values.get(lambda: made.append(1) or object())
    assert values.get(object) is parent  # made once per process
    assert _in_child(lambda: values.get(object) is not parent) == 0


def test_a_child_forked_while_a_tuning_runs_in_the_background_has_none_to_wait_for():
    tuning, release = threading.Event(), threading.Event()

    class Kernel:
        def tune(self, *clones, **options):
            tuning.set()
            release.wait()

    background.start(Kernel(), (), "kernel")
    try:
        assert tuning.wait(timeout=60)
        assert not nt.wait_for_background_tuning(timeout_s=0)  # the parent's runs
        assert _in_child(lambda: nt.wait_for_background_tuning(timeout_s=0)) == 0
    finally:
        release.set()
    assert nt.wait_for_background_tuning(timeout_s=60)
