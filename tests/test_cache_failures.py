"""Caches that are damaged, read-only, full or out of date: nothing lost, nothing trusted."""

import json
import logging
import sqlite3

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.cache import disk as disk_module
from numbatune.cache.files import export, stored_entries
from numbatune.cli import main
from tests import kernels


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


def test_a_read_only_cache_is_read_and_new_results_stay_in_memory(
    numbatune_cache, monkeypatch, caplog
):
    _tuned().tune(*_arguments(8))
    folder = _folder(numbatune_cache)
    kernels.forget_shared_state(monkeypatch)
    monkeypatch.setattr(disk_module, "writable", lambda folder: False)
    tuned = _tuned()
    with caplog.at_level(logging.INFO, logger="numbatune"):
        assert tuned.tune(*_arguments(8)).source == "disk"
        assert tuned.tune(*_arguments(64)).source == "benchmark"
    assert "is read-only" in caplog.text and "corrupt" not in caplog.text
    assert tuned.tune(*_arguments(64)).source == "memory"
    assert _folder(numbatune_cache) == folder  # not moved
    assert len(stored_entries(numbatune_cache)) == 1  # nothing written


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
    warnings = [r for r in caplog.records if "results stay in memory" in r.getMessage()]
    assert len(warnings) == 1 and "disk is full" in warnings[0].getMessage()
    assert "moved" not in caplog.text and not list(numbatune_cache.rglob("*.corrupt-*"))


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


@pytest.mark.parametrize(
    "damage",
    [{"best_index": 99}, {"best_index": -1}, {"results": "nope"}, None],
    ids=["index past the end", "negative index", "results not a list", "a JSON list"],
)
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


def test_the_command_line_reports_damaged_entries_and_clear_clears_them(numbatune_cache, capsys):
    _tuned().tune(*_arguments())
    folder = disk_module.Folder(_folder(numbatune_cache), "test")
    folder.set("(('junk',),) @0000", "{not json")
    for command in (["cache", "list"], ["cache", "show", "accumulate"], ["report", "accumulate"]):
        assert main(command) == 0
    listed = capsys.readouterr().out
    assert "damaged" in listed
    assert export(numbatune_cache, numbatune_cache / "out.json") == (1, 1)
    assert main(["cache", "clear"]) == 0
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
