"""The package as a user installs it: its version, its licence and type marker, the examples
shipped inside it, the C extension built with it (a build that cannot build it stops, saying
what to install), and an sdist that holds what its tests need.

The wheels are built as pip builds them from the sdist: the sdist is unpacked and setuptools'
PEP 517 hooks run in it, each build in a fresh copy (setuptools would reuse an earlier build).
"""

import fcntl
import hashlib
import importlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.cli import main
from numbatune.demo import find_examples_dir

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = f"numbatune/_native{sysconfig.get_config_var('EXT_SUFFIX')}"

_BUILD = """
import sys
from setuptools import build_meta

print(getattr(build_meta, sys.argv[1])(sys.argv[2]))
"""


def _run_hook(
    hook: str, source: Path, out: Path, **environment: str
) -> subprocess.CompletedProcess:
    """Run a PEP 517 hook of setuptools in ``source``. Builds in one tree take turns (pytest's
    workers each build the sdist of the repository, and two builds at once write over each
    other's files)."""
    tree = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"numbatune-build-{tree}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return subprocess.run(
            [sys.executable, "-c", _BUILD, hook, str(out)],
            cwd=source, env={**os.environ, **environment}, capture_output=True, text=True,
            check=False,
        )  # fmt: skip


def _build(hook: str, source: Path, out: Path, **environment: str) -> tuple[Path, str]:
    """Run a PEP 517 hook of setuptools in ``source``; the file it made and its log."""
    done = _run_hook(hook, source, out, **environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecat" not in done.stderr.lower(), done.stderr
    return out / done.stdout.splitlines()[-1], done.stderr


def _unpacked(sdist: Path, into: Path) -> Path:
    """A fresh copy of the source tree of ``sdist``, in ``into``."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (source,) = into.iterdir()
    return source


def _wheel_from(sdist: Path, into: Path, **environment: str) -> tuple[Path, set[str], str]:
    """A wheel built from a fresh copy of ``sdist``, its file names, and the build's log."""
    wheel, log = _build("build_wheel", _unpacked(sdist, into), into, **environment)
    with zipfile.ZipFile(wheel) as archive:
        return wheel, set(archive.namelist()), log


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return _build("build_sdist", ROOT, tmp_path_factory.mktemp("sdist"))[0]


@pytest.fixture(scope="module")
def built_wheel(sdist, tmp_path_factory):
    return _wheel_from(sdist, tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def wheel(built_wheel):
    """The file names of the wheel built from the sdist."""
    return built_wheel[1]


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"numbatune {nt.__version__}\n"


def test_the_wheel_holds_the_licence_the_type_marker_the_examples_and_the_extension(wheel):
    assert f"numbatune-{nt.__version__}.dist-info/licenses/LICENSE" in wheel
    assert "numbatune/py.typed" in wheel
    examples = {path.name for path in (ROOT / "examples").glob("*.py")}
    assert examples and {f"numbatune/examples/{name}" for name in examples} <= wheel
    assert EXTENSION in wheel  # built: the test machines have a C compiler
    assert not [name for name in wheel if name.endswith(".c")]


def test_without_a_c_compiler_the_build_stops_saying_what_to_install(sdist, tmp_path):
    done = _run_hook("build_wheel", _unpacked(sdist, tmp_path), tmp_path, CC="no-such-compiler")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: numbatune needs a C compiler and Python's headers"), last
    assert "install gcc and python3-dev (Debian/Ubuntu)" in last


def test_two_builds_of_the_sdist_at_once_both_succeed(tmp_path):
    """pytest's workers may each build the repository's sdist at the same time."""
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda n: _build("build_sdist", ROOT, tmp_path / str(n))[0], [0, 1]))
    assert all(path.is_file() for path in built)


def test_the_sdist_holds_what_its_tests_need(sdist):
    with tarfile.open(sdist) as archive:
        files = {name.partition("/")[2] for name in archive.getnames()}
    tests = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("*.py")}
    data = {str(path.relative_to(ROOT)) for path in (ROOT / "tests" / "data").iterdir()}
    assert {"conftest.py", "LICENSE", "mkdocs.yml", *tests, *data} <= files
    assert {"examples/saxpy.py", "docs/index.md", "numbatune/_native.c"} <= files


def test_the_package_index_description_has_no_links_to_files_of_the_repository(sdist):
    with tarfile.open(sdist) as archive:
        info = next(name for name in archive.getnames() if name.endswith("/PKG-INFO"))
        description = archive.extractfile(info).read().decode()
    assert "# numbatune" in description
    assert "](docs/" not in description and "](bench/" not in description
    assert "`docs/howto/porting.md`" in description


def test_the_extensions_driver_calls_raise_where_the_driver_cannot_be_loaded():
    """Where libcuda cannot be loaded the extension still builds and imports (its array reads
    need no driver); a call of its driver functions raises, saying why, instead of crashing the
    interpreter through a null pointer."""
    from numbatune import _native as module

    if module.DRIVER_ERROR is None:
        pytest.skip("the driver is loaded here: its calls are made")
    for call in [lambda: module.query(0), lambda: module.record(0, 0),
                 lambda: module.wait(0, 0),
                 lambda: module.launch(0, ((1,), (1,)), 0, b"", b"", 0, False)]:  # fmt: skip
        with pytest.raises(
            RuntimeError, match=f"no CUDA driver call can be made: {module.DRIVER_ERROR}"
        ):
            call()


def test_info_says_what_launches_the_kernels(capsys):
    assert main(["info", "--json"]) == 0
    launcher = json.loads(capsys.readouterr().out)["launcher"]
    if SIMULATOR:
        assert (
            launcher
            == "numba's CUDA simulator: no GPU (the C launcher numbatune._native is for GPUs)"
        )
    else:
        assert launcher == "C launcher (numbatune._native)"


def test_the_demo_finds_the_examples_of_the_source_tree():
    assert find_examples_dir() == ROOT / "examples"


def _readme_quickstart() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Quickstart\n", 1)[1].split("```python\n", 1)[1].split("\n```", 1)[0]


def test_the_wheel_installed_in_a_fresh_venv_runs_the_version_the_demo_and_the_quickstart(
    built_wheel, tmp_path
):
    # A fresh venv, its dependencies those of this interpreter (no index to install them
    # from), numbatune the wheel's alone; every command runs outside the repository, with no
    # GPU chosen for it (the simulator wherever this machine has none).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    site_dir = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # Where this interpreter finds the dependencies (those PYTHONPATH brings first, as here:
    # a GPU machine's own numpy may be one numba cannot use), never the repository itself.
    found = [importlib.import_module(name).__file__ for name in ("numpy", "diskcache", "numba")]
    places = [str(Path(path).parents[1]) for path in found] + [sysconfig.get_paths()["purelib"]]
    Path(site_dir, "dependencies.pth").write_text(
        "".join(f"import site; site.addsitedir({place!r})\n" for place in dict.fromkeys(places))
    )
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_ENABLE_CUDASIM")},
        "NUMBATUNE_CACHE_DIR": str(tmp_path / "cache"),
    }
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(built_wheel[0])]
    subprocess.run(pip, env=environment, check=True, capture_output=True)

    def run(*command: str) -> str:
        done = subprocess.run(
            command, cwd=tmp_path, env=environment, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert run(str(bin_dir / "numbatune"), "--version") == f"numbatune {nt.__version__}\n"
    where = run(str(python), "-c", "import numbatune.demo as d; print(d.find_examples_dir())")
    assert Path(where.strip()) == Path(site_dir, "numbatune", "examples")
    # The demo over one of the examples the wheel ships (all of them take minutes simulated).
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "saxpy.py").write_text(Path(where.strip(), "saxpy.py").read_text())
    table = run(str(bin_dir / "numbatune"), "demo", "--examples", str(examples))
    assert "saxpy" in table and "winner:" in table
    (tmp_path / "quick.py").write_text(_readme_quickstart())
    assert run(str(python), "quick.py").startswith("best: ")
