"""The package as a user installs it: its version, its licence and type marker, the examples
shipped inside it, and the C extension built with it."""

import pytest

import numbatune as nt
from numbatune.cli import main


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"numbatune {nt.__version__}\n"
