"""The documentation site builds with ``mkdocs build --strict``: no missing page, broken link or
anchor, page left out of the navigation, or docstring the API reference cannot read."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    # Installed by the test extra, so CI always runs this; a GPU machine without it skips.
    pytest.importorskip("mkdocs", reason="the docs tools (pip install -e '.[docs]') are absent")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "Make a numba CUDA kernel tune its compile-time parameters" in api  # a docstring
