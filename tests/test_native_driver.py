"""The C extension's driver calls against a stand-in driver: a ``libcuda.so.1`` built here whose
launch and event calls block until this process tells them to go on, so that a call that
kept the GIL while the driver blocks is seen, with no GPU. The extension is loaded in a
process of its own, where the stand-in is the driver it finds."""

import shlex
import subprocess
import sys
import sysconfig

from numbatune import _native

#: A driver whose blocking calls wait until ``stand_in_release()``: 0 then, or 999 after 3 s.
_DRIVER = r"""
#include <time.h>
static int entered = 0, released = 0;
static int blocking(void) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    __atomic_store_n(&entered, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&released, __ATOMIC_SEQ_CST)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 3) return 999;
    }
    return 0;
}
int cuCtxGetCurrent(void **context) { *context = (void *)1; return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **parameters, void **extra) {
    return blocking();
}
int cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shared, void *stream,
                              void **parameters) {
    return blocking();
}
int cuEventRecord(void *event, void *stream) { return blocking(); }
int cuStreamWaitEvent(void *stream, void *event, unsigned flags) { return blocking(); }
int cuEventQuery(void *event) { return 0; }
int stand_in_entered(void) { return __atomic_load_n(&entered, __ATOMIC_SEQ_CST); }
void stand_in_release(void) { __atomic_store_n(&released, 1, __ATOMIC_SEQ_CST); }
void stand_in_reset(void) { entered = released = 0; }
"""

#: Each blocking call made in a thread while this one waits, in Python, until the stand-in is
#: inside it, then lets it go on: what it returned (999 where this thread could not run until
#: the stand-in gave up).
_CALLS = r"""
import ctypes, importlib.util, sys, threading
spec = importlib.util.spec_from_file_location("numbatune._native", sys.argv[1])
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)
assert native.DRIVER_ERROR is None, native.DRIVER_ERROR
driver = ctypes.CDLL(sys.argv[2])
calls = {
    "launch": lambda: native.launch(1, (1, 1), 0, bytes(8), bytes(8), 1, False),
    "cooperative launch": lambda: native.launch(1, (1, 1), 0, bytes(8), bytes(8), 1, True),
    "record": lambda: native.record(1, 2),
    "wait": lambda: native.wait(2, 1),
}
for name, call in calls.items():
    driver.stand_in_reset()
    returned = []
    def run():
        try:
            returned.append(call())
        except Exception as error:
            returned.append(getattr(error, "code", error))
    thread = threading.Thread(target=run)
    thread.start()
    while not driver.stand_in_entered():
        pass
    driver.stand_in_release()
    thread.join()
    print(name, returned)
"""


def test_the_driver_calls_that_may_block_let_other_threads_run(tmp_path):
    driver = tmp_path / "libcuda.so.1"
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    source = tmp_path / "driver.c"
    source.write_text(_DRIVER)
    subprocess.run([*compiler, "-shared", "-fPIC", "-o", str(driver), str(source)], check=True)
    done = subprocess.run(
        [sys.executable, "-c", _CALLS, _native.__file__, str(driver)],
        env={"LD_LIBRARY_PATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "launch [0]",
        "cooperative launch [0]",
        "record [None]",
        "wait [None]",
    ]
