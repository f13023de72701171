"""Processes that cannot write in a folder: as a cache shipped in a container image, or on a
read-only mount, is met.

Tests run as root here, and root writes where permission bits forbid it; so, as root, the
process runs without the capability that allows it (CAP_DAC_OVERRIDE, dropped by util-linux's
``setpriv``), and the permission bits bind it as they bind any user. Each run first checks that
the folder cannot be written.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def read_only(command: list[str]) -> list[str]:
    """``command`` made to run where permission bits bind it: as root, without the capability
    (CAP_DAC_OVERRIDE) by which root writes where they forbid it."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("as root, setpriv is needed to make a folder read-only for a process")
    return [setpriv, "--inh-caps=-dac_override", "--bounding-set=-dac_override", *command]


def run_python(
    script: str, cache: Path, *argv: str, command: Callable = list, env: dict | None = None
) -> dict:
    """Run ``script`` in a new process (``command`` makes its command line) with ``cache`` as
    its cache (and ``env`` in its environment); what it printed last, as JSON, and its
    stderr."""
    done = subprocess.run(
        command([sys.executable, "-c", textwrap.dedent(script), *argv]),
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, **(env or {}), "NUMBATUNE_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


def run_read_only(script: str, cache: Path, *argv: str, env: dict | None = None) -> dict:
    """:func:`run_python` in a process that cannot write in ``cache`` (made read-only, as a
    cache shipped in an image or on a read-only mount is)."""
    subprocess.run(["chmod", "-R", "a-w", str(cache)], check=True)
    probe = "import sys\ntry:\n    open(sys.argv[1] + '/probe', 'w')\nexcept OSError:\n"
    probe += "    sys.exit(0)\nsys.exit('the folder is writable')"
    try:
        done = subprocess.run(read_only([sys.executable, "-c", probe, str(cache)]))
        assert done.returncode == 0, "the folder could not be made read-only"
        return run_python(script, cache, *argv, command=read_only, env=env)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(cache)], check=True)
