"""The package as a user installs it: its version, its licence and type marker, the examples
shipped inside it, and the C extension built with it."""

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import numbatune as nt
from numbatune.cli import main
from numbatune.demo import find_examples_dir


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"numbatune {nt.__version__}\n"


ROOT = Path(__file__).resolve().parents[1]

_BUILD = """
import sys
from setuptools import build_meta

print(getattr(build_meta, sys.argv[1])(sys.argv[2]))
"""


def _build(hook: str, out: Path) -> Path:
    """Run a PEP 517 hook of setuptools on this source tree, as pip and build do."""
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, hook, str(out)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecat" not in done.stderr.lower(), done.stderr
    return out / done.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def distributions(tmp_path_factory):
    """The wheel's and the sdist's file names, built from this source tree."""
    out = tmp_path_factory.mktemp("dist")
    wheel, sdist = _build("build_wheel", out), _build("build_sdist", out)
    with zipfile.ZipFile(wheel) as archive:
        wheel_files = set(archive.namelist())
    with tarfile.open(sdist) as archive:
        sdist_files = {name.partition("/")[2] for name in archive.getnames()}
    return wheel_files, sdist_files


def test_the_wheel_holds_the_licence_the_type_marker_and_the_examples(distributions):
    wheel, _ = distributions
    assert f"numbatune-{nt.__version__}.dist-info/licenses/LICENSE" in wheel
    assert "numbatune/py.typed" in wheel
    examples = {path.name for path in (ROOT / "examples").glob("*.py")}
    assert examples and {f"numbatune/examples/{name}" for name in examples} <= wheel


def test_the_sdist_holds_what_its_tests_need(distributions):
    _, sdist = distributions
    tests = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("*.py")}
    assert {"conftest.py", "LICENSE", "mkdocs.yml", *tests} <= sdist
    assert "examples/saxpy.py" in sdist and "docs/index.md" in sdist


def test_the_demo_finds_the_examples_of_the_source_tree():
    assert find_examples_dir() == ROOT / "examples"
