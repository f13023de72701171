"""Settings: every one from its environment variable or Python, with clear errors."""

import logging
import os
import subprocess
import sys

import pytest

import numbatune as nt


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("level", "fastest", "must be one of minimal, balanced, extensive, full"),
        ("budget_s", "-1", "must be a number > 0"),
        ("check", "maybe", "must be one of 1/0, true/false"),
        ("on_miss", "later", "must be one of tune, nearest, background, error"),
        ("log_level", "loud", "must be one of debug, info, warning, error"),
    ],
)
def test_invalid_values_name_the_setting_and_its_variable(name, value, expected):
    with pytest.raises(ValueError, match=f"NUMBATUNE_{name.upper()}") as error:
        nt.configure(**{name: value})
    assert expected in str(error.value)


def test_unknown_settings_are_refused():
    with pytest.raises(ValueError, match="unknown setting 'budget'"):
        nt.configure(budget=1)


def test_the_log_level_setting_sets_the_numbatune_logger():
    logger = logging.getLogger("numbatune")
    previous = logger.level
    try:
        nt.configure(log_level="DEBUG")
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(previous)
        nt.configure(log_level="warning")


def test_log_level_none_the_default_leaves_the_level_to_the_application():
    logger = logging.getLogger("numbatune")
    previous, setting = logger.level, nt.settings.log_level
    try:
        nt.settings.log_level = None  # as by default
        logger.setLevel(logging.ERROR)  # the application's own choice
        assert nt.configure(log_level=None).log_level is None
        assert logger.level == logging.ERROR  # left as the application set it
        nt.configure(log_level="debug")
        assert logger.level == logging.DEBUG
        nt.configure(log_level=None)
        assert logger.level == logging.NOTSET  # numbatune's level undone: the application's again
    finally:
        nt.settings.log_level = setting
        logger.setLevel(previous)


def test_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    from numbatune.tuning.progress import Progress

    progress = Progress("k", 4)
    progress._started -= 10  # as if tuning had run for ten seconds
    progress.step(2, "compiled")
    progress.close()
    assert capsys.readouterr().err == ""


def test_progress_shows_on_a_terminal_after_a_moment_and_clears_its_line():
    import io

    from numbatune.tuning.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    progress = Progress("saxpy", 4, terminal)
    progress.step(1, "compiled")
    assert terminal.getvalue() == ""  # not within the first second
    progress._started -= 10
    progress.step(2, "compiled")
    assert "tuning saxpy [##########..........] 2/4 compiled" in terminal.getvalue()
    progress.close()
    assert terminal.getvalue().endswith("\r\033[K")


def test_every_setting_is_in_the_documented_table():
    from dataclasses import fields
    from pathlib import Path

    table = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    for field in fields(nt.settings):
        assert f"`NUMBATUNE_{field.name.upper()}`" in table, field.name


BAD_VARIABLE = """
import numbatune as nt
from numba import cuda

try:
    nt.autotune(variants=[{}], launch=lambda a: (1, 1))(cuda.jit(lambda a: None))
except ValueError as error:
    print("refused:", error)
"""


def test_an_invalid_environment_variable_lets_numbatune_import_and_refuses_tuning():
    """Importing numbatune with an invalid ``NUMBATUNE_*`` variable succeeds (the command line
    can say so in one line); defining a tuned kernel raises, naming the variable."""
    env = {**os.environ, "NUMBATUNE_LEVEL": "bogus", "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "-c", BAD_VARIABLE], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "refused: numbatune: invalid value 'bogus' for setting level (NUMBATUNE_LEVEL)" in (
        done.stdout
    )


def test_the_command_line_says_an_invalid_environment_variable_in_one_line():
    env = {**os.environ, "NUMBATUNE_SEARCH_BUDGET": "0", "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "-m", "numbatune", "info"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    [said] = [line for line in done.stderr.splitlines() if "NUMBATUNE_SEARCH_BUDGET" in line]
    assert said.startswith("numbatune: error: invalid value '0' for setting search_budget")
    assert "Traceback" not in done.stderr


def test_the_removed_tune_setting_warns_and_is_taken_as_on_miss(monkeypatch):
    monkeypatch.setattr(nt.settings, "on_miss", nt.OnMiss.TUNE)
    with pytest.warns(DeprecationWarning, match=r"the tune setting .* is deprecated; use on_miss"):
        nt.configure(tune="off")
    assert nt.settings.on_miss is nt.OnMiss.NEAREST
    with pytest.warns(DeprecationWarning, match="settings.tune is deprecated"):
        assert nt.settings.tune is False
    with pytest.warns(DeprecationWarning):
        nt.configure(tune=True)
    assert nt.settings.on_miss is nt.OnMiss.TUNE
    with pytest.raises(ValueError, match=r"setting tune \(NUMBATUNE_TUNE\): must be one of 1/0"):
        nt.configure(tune="maybe")


def test_the_removed_tune_variable_is_still_read():
    code = "import numbatune as nt; print(nt.settings.on_miss)"
    env = {**os.environ, "NUMBATUNE_TUNE": "0", "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.stdout.strip() == "nearest", done.stderr
