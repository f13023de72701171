"""Test set-up shared by the whole suite.

Importing numbatune first lets it choose numba's CUDA simulator on a machine with no GPU, before
numba is imported. numbatune's pytest plugin (the ``gpu`` marker and the ``numbatune_cache``
fixture) is loaded through its entry point once numbatune is installed, and from here when the
suite runs from a source tree on ``PYTHONPATH``. Every test gets a tune cache of its own, and
Hypothesis no time limits.
"""

import pytest
from hypothesis import HealthCheck, settings

import numbatune  # noqa: F401

pytest_plugins = ["numbatune.pytest_plugin", "pytester"]

# How long Hypothesis takes to make or run an example is no behaviour these tests assert, and
# the machines running them stall (CI's two cores, sixteen workers sharing a GPU host): a
# 2.4 s stall while drawing failed a state test's health check there.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def isolated_tune_cache(numbatune_cache):
    """Every test of this suite runs with a fresh tune cache."""
    return numbatune_cache


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers for every two cores. Many tests wait on worker processes, the
    compiler or the file system rather than compute, so one worker a core leaves cores idle (on
    two cores the suite took 478 s with two workers and 428 s with three)."""
    import os

    return max(1, (3 * (os.cpu_count() or 1)) // 2)
