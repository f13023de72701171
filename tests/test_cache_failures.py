"""Caches that are damaged, read-only, full or out of date: nothing lost, nothing trusted."""

import contextlib
import errno
import json
import logging
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.cache import compiled
from numbatune.cache import disk as disk_module
from numbatune.cache import entry as entries
from numbatune.cache.files import export, size_bytes, stored_entries
from numbatune.cli import main
from tests import kernels
from tests.read_only import made_read_only, read_only, run, run_python, run_read_only


def _tuned(blocks=(2, 4)):
    return nt.autotune(variants=nt.product(BLOCK=list(blocks)), launch=kernels.accumulate_launch)(
        kernels.accumulate
    )


def _arguments(n=8):
    return cuda.to_device(np.ones(n, np.float32)), cuda.to_device(np.zeros(n, np.float32))


def _folder(cache):
    """The tune cache's folder (not the compiled kernels' beside it)."""
    (database,) = (p for p in cache.rglob("cache.db") if "kernels" not in p.parts)
    return database.parent


READ_ONLY_TUNING = """
import contextlib
import io
import json
import sys
import numpy as np
import numbatune as nt
from numba import cuda
from numbatune.cli import main
from tests import kernels
from tests.test_cache_failures import _arguments, _tuned

tuned = _tuned()
sources = [tuned.tune(*_arguments(int(n))).source for n in sys.argv[1:]]
listed = io.StringIO()
with contextlib.redirect_stdout(listed):
    main(["cache", "list", "--json"])
print(json.dumps({"sources": sources, "listed": json.loads(listed.getvalue())}))
"""


def _memory_warnings(caplog):
    """The warnings that new entries stay in memory."""
    return [r.getMessage() for r in caplog.records if "stay in memory" in r.getMessage()]


def _both_stores(cache):
    """A results folder and a compiled kernels folder under the cache directory ``cache``, each
    holding one entry (the kernels' are used on a GPU only: here their folder is made)."""
    folders = [
        disk_module.Folder(cache / "device" / "function", "f"),
        disk_module.Folder(cache / "kernels" / "sm_90" / "function", "f", disk_module.KERNELS),
    ]
    for folder in folders:
        assert folder.set("key", b"value")
        folder.close()
    return [folder.folder for folder in folders]


def test_a_cache_directory_both_stores_cannot_write_in_is_warned_of_once(
    tmp_path, monkeypatch, caplog
):
    """Read-only (a cache shipped in an image) and then a full disk: one warning each for the
    directory, whichever store meets it first, naming what stays in memory."""
    results, kernels = _both_stores(tmp_path / "cache")
    monkeypatch.setattr(disk_module, "writable", lambda folder: False)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        opened = [disk_module.Folder(results, "f"),
                  disk_module.Folder(kernels, "f", disk_module.KERNELS)]  # fmt: skip
    assert [folder.get("key") for folder in opened] == [b"value", b"value"]
    (warning,) = _memory_warnings(caplog)
    assert f"the tune cache at {tmp_path / 'cache'} cannot be written" in warning
    assert "new results and compiled kernels stay in memory" in warning

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.undo()
    monkeypatch.setattr(disk_module.diskcache.Cache, "set", full)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        opened = [disk_module.Folder(results, "f"),
                  disk_module.Folder(kernels, "f", disk_module.KERNELS)]  # fmt: skip
        assert [folder.set("other", b"value") for folder in opened] == [False, False]
    (warning,) = _memory_warnings(caplog)
    assert "the disk is full" in warning and "results and compiled kernels" in warning


def test_a_read_only_cache_is_read_and_new_results_stay_in_memory(numbatune_cache):
    """A cache tuned by a process that has ended, then shipped read-only."""
    assert run_python(READ_ONLY_TUNING, numbatune_cache, "8")["sources"] == ["benchmark"]
    folder = _folder(numbatune_cache)
    ran = run_read_only(READ_ONLY_TUNING, numbatune_cache, "8", "64", "64")
    assert ran["sources"] == ["disk", "benchmark", "memory"]
    assert [(row["keys"], row["damaged"]) for row in ran["listed"]] == [(1, 0)]
    notes = [line for line in ran["stderr"].splitlines() if "stay in memory" in line]
    assert len(notes) == 1 and "read-only" in notes[0] and "what it holds is used" in notes[0]
    assert _folder(numbatune_cache) == folder  # not moved
    assert len(stored_entries(numbatune_cache)) == 1  # nothing written


def test_a_read_only_cache_whose_log_has_no_shared_memory_file_serves_what_the_log_holds(
    numbatune_cache, tmp_path
):
    """A cache copied while in use (its results still in SQLite's log, ``cache.db-wal``)
    without the shared-memory file (``-shm``), then shipped read-only: the log's results are
    served, and the copy is not changed."""
    _tuned().tune(*_arguments(8))  # this process keeps the cache open: the result is in the log
    shipped = tmp_path / "shipped"
    shutil.copytree(numbatune_cache, shipped, ignore=shutil.ignore_patterns("*-shm"))
    log = _folder(shipped) / "cache.db-wal"
    assert log.stat().st_size > 0
    files = {path: path.read_bytes() for path in shipped.rglob("*") if path.is_file()}
    ran = run_read_only(READ_ONLY_TUNING, shipped, "8")
    assert ran["sources"] == ["disk"]
    assert [(row["keys"], row["damaged"]) for row in ran["listed"]] == [(1, 0)]
    assert {path: path.read_bytes() for path in shipped.rglob("*") if path.is_file()} == files


@pytest.mark.parametrize("where", ["open", "write"])
def test_a_full_disk_keeps_results_in_memory_with_one_warning(
    numbatune_cache, monkeypatch, caplog, where
):
    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    if where == "open":
        monkeypatch.setattr(disk_module.diskcache, "Cache", full)
    else:
        monkeypatch.setattr(disk_module.diskcache.Cache, "set", full)
    tuned = _tuned()
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert tuned.tune(*_arguments(8)).source == "benchmark"
        assert tuned.tune(*_arguments(64)).source == "benchmark"
    assert tuned.tune(*_arguments(8)).source == "memory"
    (warning,) = _memory_warnings(caplog)
    assert "disk is full" in warning
    assert "moved" not in caplog.text and not list(numbatune_cache.rglob("*.corrupt-*"))


@pytest.mark.parametrize(
    "full",
    [sqlite3.OperationalError("database or disk is full"),
     OSError(errno.ENOSPC, "No space left on device")],
    ids=["sqlite", "errno"],
)  # fmt: skip
def test_keys_stored_before_the_disk_filled_up_are_still_read(
    numbatune_cache, monkeypatch, caplog, full
):
    _tuned().tune(*_arguments(8))
    kernels.forget_shared_state(monkeypatch)

    def no_space(*args, **kwargs):
        raise full

    monkeypatch.setattr(disk_module.diskcache, "Cache", no_space)  # SQLite writes as it opens
    tuned = _tuned()
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert tuned.tune(*_arguments(8)).source == "disk"
        assert tuned.tune(*_arguments(64)).source == "benchmark"
    (warning,) = _memory_warnings(caplog)
    assert "the disk is full" in warning and "free some space" in warning


@pytest.mark.parametrize("damage", ["emptied", "cut short", "overwritten"])
def test_keys_stored_after_the_cache_was_damaged_under_a_running_process_are_kept(
    numbatune_cache, monkeypatch, caplog, damage
):
    tuned = _tuned()
    tuned.tune(*_arguments(8))
    database = _folder(numbatune_cache) / "cache.db"
    with contextlib.closing(sqlite3.connect(database)) as connection:  # the log into the file,
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # which is then all there is
    if damage == "overwritten":
        database.write_bytes(b"garbage" * 1000)
    else:
        os.truncate(database, 0 if damage == "emptied" else database.stat().st_size // 2)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert tuned.tune(*_arguments(64)).source == "benchmark"
        assert tuned.tune(*_arguments(128)).source == "benchmark"
    assert caplog.text.count("was damaged while in use") == 1 and "moved it to" in caplog.text
    assert len(list(numbatune_cache.rglob("*.corrupt-*"))) == 1
    kernels.forget_shared_state(monkeypatch)
    again = _tuned()
    assert [again.tune(*_arguments(n)).source for n in (64, 128)] == ["disk", "disk"]


def test_a_corrupt_cache_that_cannot_be_moved_aside_says_so(numbatune_cache, monkeypatch, caplog):
    _tuned().tune(*_arguments())
    (_folder(numbatune_cache) / "cache.db").write_bytes(b"not a database" * 100)
    kernels.forget_shared_state(monkeypatch)

    def refuse(*args):
        raise PermissionError("not allowed")

    monkeypatch.setattr(disk_module.shutil, "move", refuse)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    assert "could not be moved aside (not allowed)" in caplog.text
    assert "moved it to" not in caplog.text


def test_a_corrupt_cache_moved_aside_whose_fresh_one_cannot_start_says_so(
    numbatune_cache, monkeypatch, caplog
):
    _tuned().tune(*_arguments())
    (_folder(numbatune_cache) / "cache.db").write_bytes(b"not a database" * 100)
    kernels.forget_shared_state(monkeypatch)
    opened = disk_module.diskcache.Cache

    def fresh_fails(directory, *args, **kwargs):
        if (Path(directory) / "cache.db").exists():
            return opened(directory, *args, **kwargs)  # (the damaged one: found corrupt)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(disk_module.diskcache, "Cache", fresh_fails)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    assert "could not be moved aside" not in caplog.text
    assert "moved it to" in caplog.text and "a fresh one could not be started" in caplog.text
    assert len(list(numbatune_cache.rglob("*.corrupt-*"))) == 1


@pytest.mark.parametrize(
    "damage",
    [{"best_index": 99}, {"best_index": -1}, {"results": "nope"}, None,
     {"compile_s": 10**400}, {"strategy": []}],
    ids=["index past the end", "negative index", "results not a list", "a JSON list",
         "a time beyond a float's range", "a list as the strategy"],
)  # fmt: skip
def test_a_damaged_but_valid_json_entry_is_discarded_and_tuned_again(
    numbatune_cache, monkeypatch, caplog, damage
):
    first = _tuned()
    first.tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    entry = json.loads(folder.get(stored_under))
    folder.set(stored_under, json.dumps([entry] if damage is None else {**entry, **damage}))
    kernels.forget_shared_state(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    assert "discarded a damaged tune cache entry" in caplog.text


@pytest.mark.parametrize(
    "damage",
    [{"status": "failed", "error": "x", "median_s": "fast"}, {"error": 5},
     {"params": ["BLOCK", 2]}, {"status": "mismatched", "mismatch": {"output": "out"}},
     {"status": "mismatched", "median_s": None, "spread_s": None, "runs": None,
      "mismatch": {"output": "out", "count": 1, "size": 8, "largest_error": 10**400}}],
    ids=["a failed result with a time", "a timed result with an error", "params not a mapping",
         "a mismatch without counts", "a largest error beyond a float's range"],
)  # fmt: skip
def test_an_entry_whose_results_are_wrong_is_discarded_and_tuned_again(
    numbatune_cache, monkeypatch, caplog, capsys, damage
):
    _tuned().tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    entry = json.loads(folder.get(stored_under))
    other = 1 - entry["best_index"]
    entry["results"][other] = {**entry["results"][other], **damage}
    folder.set(stored_under, json.dumps(entry))
    assert main(["cache", "list", "--json"]) == 0
    assert [(row["keys"], row["damaged"]) for row in json.loads(capsys.readouterr().out)] == [
        (0, 1)
    ]
    kernels.forget_shared_state(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    assert "discarded a damaged tune cache entry" in caplog.text


def test_an_import_into_a_cache_it_cannot_write_fails_saying_why(
    numbatune_cache, tmp_path, monkeypatch, capsys
):
    _tuned().tune(*_arguments())
    export(numbatune_cache, tmp_path / "shipped.json")
    target = tmp_path / "read-only cache"
    target.mkdir()
    with made_read_only(target):
        command = [sys.executable, "-m", "numbatune", "cache", "import", "shipped.json"]
        done = run(command, target, read_only, cwd=tmp_path)
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("numbatune: error")]
    assert done.returncode == 2 and "is read-only" in line and "Traceback" not in done.stderr
    assert not any(target.iterdir())

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setenv("NUMBATUNE_CACHE_DIR", str(tmp_path / "full"))
    nt.configure(cache_dir=tmp_path / "full")
    monkeypatch.setattr(disk_module.diskcache.Cache, "add", full)
    assert main(["cache", "import", str(tmp_path / "shipped.json")]) == 1
    shipped = json.loads((tmp_path / "shipped.json").read_text())
    count = len(shipped["entries"]) + len(shipped["kernels"])  # (kernels: compiled on a GPU)
    assert f"could not write {count}: the disk is full" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damaged",
    [lambda entry: "{not json", lambda entry: json.dumps({**entry, "compile_s": 10**400})],
    ids=["not JSON", "a time beyond a float's range"],
)
def test_the_command_line_reports_damaged_entries_and_clear_clears_them(
    numbatune_cache, capsys, damaged
):
    _tuned().tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    folder.set("(('junk',),) @0000", damaged(json.loads(folder.get(stored_under))))
    for command in (["cache", "list"], ["cache", "show", "accumulate"], ["report", "accumulate"]):
        assert main(command) == 0
    listed = capsys.readouterr().out
    assert "damaged" in listed
    written, damaged = export(numbatune_cache, numbatune_cache / "out.json")
    assert (written.results, damaged) == (1, 1)
    assert main(["cache", "clear"]) == 0
    assert stored_entries(numbatune_cache) == []


def test_cache_clear_of_one_function_clears_the_damaged_entries_of_its_folder_only(
    numbatune_cache, capsys
):
    _tuned().tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    folder.set("(('junk',),) @0000", "{not json")
    folder.close()
    assert main(["cache", "clear", "cum"]) == 0  # a part of accumulate's name, not its name
    assert "deleted 0 stored results" in capsys.readouterr().err
    assert len(stored_entries(numbatune_cache)) == 2
    assert main(["cache", "clear", "accumulate"]) == 0
    assert "deleted 2 stored results" in capsys.readouterr().err
    assert stored_entries(numbatune_cache) == []


def test_an_import_after_an_upgrade_is_used_instead_of_the_stale_entry(
    numbatune_cache, monkeypatch, tmp_path
):
    tuned = _tuned()
    tuned.tune(*_arguments())
    shipped = tmp_path / "shipped.json"
    export(numbatune_cache, shipped)
    document = json.loads(shipped.read_text())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    stale = json.loads(folder.get(stored_under))
    folder.delete(stored_under)
    folder.set(stored_under.replace(stale["checksum"], "0" * 32), json.dumps(
        {**stale, "checksum": "0" * 32}))  # fmt: skip
    result = nt.cache_import(shipped)
    assert (result.imported, result.already_present) == (1, 0)
    kernels.forget_shared_state(monkeypatch)
    assert _tuned().tune(*_arguments()).source == "disk"
    assert document["entries"][0]["entry"]["checksum"] == stale["checksum"]


def test_an_export_that_cannot_be_written_leaves_the_earlier_file_whole(
    numbatune_cache, tmp_path, monkeypatch
):
    _tuned().tune(*_arguments())
    output = tmp_path / "export.json"
    output.write_text("the earlier export")
    write_text = Path.write_text

    def half_then_full(self, text, *args, **kwargs):
        write_text(self, text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    with pytest.raises(nt.CacheFileError, match="the disk is full"):
        export(numbatune_cache, output)
    assert output.read_text() == "the earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json", "numbatune-cache"]


def test_a_cache_directory_that_is_a_file_is_said_in_words_when_tuning_and_by_info(
    numbatune_cache, tmp_path, caplog, capsys
):
    a_file = tmp_path / "not a folder"
    a_file.write_text("")
    nt.configure(cache_dir=a_file)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    (warning,) = _memory_warnings(caplog)
    assert f"{a_file} is a file, not a folder" in warning and "give a folder" in warning
    assert main(["info", "--json"]) == 0
    assert "is a file, not a folder" in json.loads(capsys.readouterr().out)["cache_problem"]


@pytest.mark.parametrize(
    ("error", "words"),
    [(PermissionError(errno.EPERM, "Operation not permitted", "/shipped"), "is read-only"),
     (OSError(errno.EROFS, "Read-only file system", "/shipped"), "is read-only"),
     (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
     (sqlite3.OperationalError("attempt to write a readonly database"), "is read-only")],
    ids=["EPERM", "EROFS", "ENOSPC", "SQLite's read-only"],
)  # fmt: skip
def test_a_cache_that_cannot_be_written_says_why_in_words(
    numbatune_cache, monkeypatch, caplog, error, words
):
    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(disk_module.diskcache, "Cache", refuse)
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert _tuned().tune(*_arguments()).source == "benchmark"
    (warning,) = [r.getMessage() for r in caplog.records if "stay in memory" in r.getMessage()]
    assert words in warning


#: A result whose largest error is an integer beyond a float's range (JSON's have no bound).
_MISMATCH_BEYOND_FLOATS = {
    "variant": "BLOCK=8", "params": {"BLOCK": "8"}, "jit": {}, "status": "mismatched",
    "median_s": None, "spread_s": None, "runs": None, "error": None,
    "mismatch": {"output": "out", "count": 1, "size": 8, "largest_error": 10**400},
}  # fmt: skip


def _refused_in_one_line(capsys, shipped, numbatune_cache):
    """``numbatune cache import shipped`` fails with one line naming the file, writing nothing."""
    before = stored_entries(numbatune_cache)
    assert main(["cache", "import", str(shipped)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("numbatune: error: ") and str(shipped) in line
    assert stored_entries(numbatune_cache) == before


@pytest.mark.parametrize(
    "damage",
    [lambda entry: {**entry, "compile_s": 10**400},
     lambda entry: {**entry, "strategy": []},
     lambda entry: {**entry, "results": [*entry["results"], _MISMATCH_BEYOND_FLOATS]}],
    ids=["a time beyond a float's range", "a list as the strategy",
         "a largest error beyond a float's range"],
)  # fmt: skip
def test_an_export_with_a_damaged_entry_is_refused_in_one_line(
    numbatune_cache, tmp_path, capsys, damage
):
    _tuned().tune(*_arguments())
    shipped = tmp_path / "shipped.json"
    export(numbatune_cache, shipped)
    document = json.loads(shipped.read_text())
    document["entries"][0]["entry"] = damage(document["entries"][0]["entry"])
    shipped.write_text(json.dumps(document))
    with pytest.raises(entries.DamagedEntry):
        entries.check(document["entries"][0]["entry"])
    _refused_in_one_line(capsys, shipped, numbatune_cache)


@pytest.mark.parametrize(
    "entries_text",
    ["[" * 100_000 + "]" * 100_000, "[" + "9" * 5000 + "]"],
    ids=["nested too deep", "a number of more digits than Python reads"],
)
def test_an_export_json_cannot_read_is_refused_in_one_line(
    numbatune_cache, tmp_path, capsys, entries_text
):
    shipped = tmp_path / "shipped.json"
    shipped.write_text(f'{{"format": "numbatune-cache", "version": 1, "entries": {entries_text}}}')
    _refused_in_one_line(capsys, shipped, numbatune_cache)


def test_an_import_replaces_a_damaged_entry_under_the_same_key(
    numbatune_cache, tmp_path, monkeypatch
):
    _tuned().tune(*_arguments())
    shipped = tmp_path / "shipped.json"
    export(numbatune_cache, shipped)
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    folder.set(stored_under, "{not json")
    folder.close()
    result = nt.cache_import(shipped)
    assert (result.imported, result.already_present) == (1, 0)
    kernels.forget_shared_state(monkeypatch)
    assert _tuned().tune(*_arguments()).source == "disk"
    assert nt.cache_import(shipped).already_present == 1


def test_an_import_replaces_a_damaged_compiled_kernel_under_the_same_key(numbatune_cache):
    kernel = compiled.Kernel("sm_90", "pkg.kernel", "ab" * 20, b"a kernel")
    folder = disk_module.Folder(
        kernel.folder(numbatune_cache), kernel.function, disk_module.KERNELS
    )
    folder.set(kernel.key, "not a kernel's payload")
    folder.close()
    added = compiled.add([kernel], numbatune_cache)
    assert (added.written, added.already_present) == (1, 0)
    assert compiled.stored(numbatune_cache, [kernel.function]) == [kernel]


def test_cache_clear_counts_the_results_it_deleted_and_no_unfinished_tuning(
    numbatune_cache, capsys
):
    _tuned().tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    (stored_under,) = folder.stored_keys()
    checksum = json.loads(folder.get(stored_under))["checksum"]
    outcomes = entries.encode_outcomes({}, checksum, None, nt.Timing.LAUNCHES)
    folder.set(entries.journal_key("(('other',),)", checksum), json.dumps(outcomes))
    folder.close()
    assert main(["cache", "clear"]) == 0
    assert "deleted 1 stored results" in capsys.readouterr().err
    assert disk_module.Folder(_folder(numbatune_cache), "test").stored_keys() == []


def test_cache_clear_counts_no_result_it_could_not_delete(numbatune_cache, monkeypatch, capsys):
    _tuned().tune(*_arguments())

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(disk_module.diskcache.Cache, "delete", full)
    assert main(["cache", "clear"]) == 0
    assert "deleted 0 stored results" in capsys.readouterr().err
    assert len(stored_entries(numbatune_cache)) == 1


def test_a_write_probe_that_fails_part_way_is_not_left_behind(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    write_bytes = Path.write_bytes

    def half_then_full(self, data):
        write_bytes(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    assert "the disk is full" in disk_module.write_problem(cache)
    assert list(cache.iterdir()) == []


class _Listing:
    """A folder's entries as :func:`os.scandir` gives them, read whole beforehand."""

    def __init__(self, found):
        self._found = iter(found)

    def __enter__(self):
        return self

    def __exit__(self, *raised):
        return None

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._found)


def _removed_once_listed(monkeypatch):
    """Log files (-wal, -shm) and the folders of compiled kernels go as soon as their folder is
    listed: another process closed its cache, or cleared its kernels."""
    scandir = os.scandir

    def listed(path):
        with scandir(path) as listing:
            found = list(listing)
        for entry in found:
            if entry.name.endswith(("-wal", "-shm")):
                os.unlink(entry.path)
            elif entry.name == "sm_90":
                shutil.rmtree(entry.path)
        return _Listing(found)

    monkeypatch.setattr(os, "scandir", listed)


def _removed_once_looked_at(monkeypatch):
    """Log files (-wal, -shm) go as soon as their status is read: another process closed its
    cache."""
    stat = os.stat

    def looked_at(path, *args, **kwargs):
        found = stat(path, *args, **kwargs)
        if str(path).endswith(("-wal", "-shm")):
            os.unlink(path)
        return found

    monkeypatch.setattr(os, "stat", looked_at)


@pytest.mark.parametrize(
    ("removed", "counted"),
    [(_removed_once_listed, 4096), (_removed_once_looked_at, 4096 + 1000 + 32768 + 512)],
    ids=["once listed", "once looked at"],
)
def test_the_size_of_the_cache_leaves_out_files_removed_before_it_is_read(
    tmp_path, monkeypatch, removed, counted
):
    """(``numbatune info``.) A file or folder removed before its size is read counts as none."""
    cache = tmp_path / "cache"
    sizes = {
        "device/function/cache.db": 4096,
        "device/function/cache.db-wal": 1000,
        "device/function/cache.db-shm": 32768,
        "kernels/sm_90/function/cache.db": 512,
    }
    for name, size in sizes.items():
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_bytes(b"\0" * size)
    removed(monkeypatch)
    assert size_bytes(cache) == counted
