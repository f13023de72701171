"""numbatune's pytest plugin (registered as a ``pytest11`` entry point).

- The ``gpu`` marker: tests marked ``@pytest.mark.gpu`` are skipped, with a reason, where
  numbatune runs under numba's CUDA simulator (no GPU).
- The ``numbatune_cache`` fixture: the test gets a tune cache of its own, in a temporary
  directory, so no result tuned by one test (or by an earlier run) answers another.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (skipped under the simulator)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from numbatune.arrays import SIMULATOR

    if not SIMULATOR:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU; running under numba's simulator")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not any keyword "gpu"
            item.add_marker(skip)


@pytest.fixture
def numbatune_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh tune cache directory for this test (in memory and on disk); yields its path."""
    import numbatune

    directory = tmp_path / "numbatune-cache"
    previous = numbatune.settings.cache_dir
    numbatune.configure(cache_dir=directory)
    monkeypatch.setenv("NUMBATUNE_CACHE_DIR", str(directory))
    try:
        yield directory
    finally:
        numbatune.configure(cache_dir=previous)
