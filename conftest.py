"""Test set-up shared by the whole suite.

Importing numbatune first lets it choose numba's CUDA simulator on a machine with no GPU, before
numba is imported. numbatune's pytest plugin (the ``gpu`` marker and the ``numbatune_cache``
fixture) is loaded through its entry point once numbatune is installed, and from here when the
suite runs from a source tree on ``PYTHONPATH``. Every test gets a tune cache of its own.
"""

import pytest

import numbatune  # noqa: F401

pytest_plugins = ["numbatune.pytest_plugin", "pytester"]


@pytest.fixture(autouse=True)
def isolated_tune_cache(numbatune_cache):
    """Every test of this suite runs with a fresh tune cache."""
    return numbatune_cache
