"""Test set-up shared by the whole suite.

Importing numbatune first lets it choose numba's CUDA simulator on a machine with no GPU, before
numba is imported. Every test gets a tune cache of its own, in a temporary directory.
"""

import pytest

import numbatune
from numbatune.arrays import SIMULATOR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SIMULATOR:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU; running under numba's simulator")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_tune_cache(tmp_path, monkeypatch):
    """Point the disk tune cache at a fresh directory for each test."""
    previous = numbatune.settings.cache_dir
    numbatune.configure(cache_dir=tmp_path / "tune-cache")
    monkeypatch.setenv("NUMBATUNE_CACHE_DIR", str(tmp_path / "tune-cache"))
    yield tmp_path / "tune-cache"
    numbatune.configure(cache_dir=previous)
