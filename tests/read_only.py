"""Processes that cannot write in a folder: as a cache shipped in a container image, or on a
read-only mount, is met.

Tests run as root here, and root writes where permission bits forbid it; so, as root, the
process runs without the capability that allows it (CAP_DAC_OVERRIDE, dropped by util-linux's
``setpriv``), and the permission bits bind it as they bind any user. Each run first checks that
the folder cannot be written.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
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


def run(
    arguments: list[str],
    cache: Path,
    command: Callable = list,
    env: dict | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess:
    """Run ``arguments`` (``command`` makes the command line of them) with ``cache`` as the
    cache directory (and ``env`` in the environment), in ``cwd``."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        command(arguments), capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, **(env or {}), "NUMBATUNE_CACHE_DIR": str(cache)},
    )  # fmt: skip


def run_python(
    script: str, cache: Path, *argv: str, command: Callable = list, env: dict | None = None
) -> dict:
    """:func:`run` ``script`` in a new Python process; what it printed last, as JSON, and its
    stderr."""
    done = run([sys.executable, "-c", textwrap.dedent(script), *argv], cache, command, env)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@contextlib.contextmanager
def made_read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only (for processes run through :func:`read_only`) while in the
    block."""
    subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True)
    probe = "import sys\ntry:\n    open(sys.argv[1] + '/probe', 'w')\nexcept OSError:\n"
    probe += "    sys.exit(0)\nsys.exit('the folder is writable')"
    try:
        done = subprocess.run(read_only([sys.executable, "-c", probe, str(folder)]))
        assert done.returncode == 0, "the folder could not be made read-only"
        yield
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(folder)], check=True)


def run_read_only(script: str, cache: Path, *argv: str, env: dict | None = None) -> dict:
    """:func:`run_python` in a process that cannot write in ``cache`` (made read-only, as a
    cache shipped in an image or on a read-only mount is)."""
    with made_read_only(cache):
        return run_python(script, cache, *argv, command=read_only, env=env)
