"""The numbatune command: info, cache list/show/clear/export/import and report, as a user runs
them; data on stdout (tables or --json), messages on stderr, exit status 0/1/2."""

import json

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.arrays import SIMULATOR
from numbatune.cache import files as cachefile
from numbatune.cli import main
from numbatune.devices import current_kind
from numbatune.testing import covering_variants
from tests.kernels import forget_shared_state, load_example


def _saxpy():
    """A fresh saxpy; under the simulator, its few variants that take every parameter value."""
    saxpy = load_example("saxpy").saxpy
    return saxpy.with_variants(covering_variants(saxpy)) if SIMULATOR else saxpy


@pytest.fixture
def tuned_saxpy():
    """saxpy tuned for one key, its result on disk."""
    saxpy = _saxpy()
    x = cuda.to_device(np.ones(100, np.float32))
    saxpy.tune(np.float32(2.0), x, x, cuda.device_array(100, np.float32), force=True)
    return saxpy


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_info_reports_the_simulator_versions_and_the_cache(capsys, numbatune_cache):
    status, out, _ = run(capsys, "info", "--json")
    data = json.loads(out)
    assert status == 0 and data["cache_dir"] == str(numbatune_cache)
    assert data["versions"]["numbatune"] == nt.__version__
    assert data["simulator"] is SIMULATOR and bool(data["devices"]) is not SIMULATOR
    status, out, _ = run(capsys, "info")
    assert status == 0 and "numba-cuda" in out


def test_cache_list_and_show_give_tables_and_json(capsys, tuned_saxpy):
    status, out, _ = run(capsys, "cache", "list")
    assert status == 0 and "saxpy" in out and current_kind().partition in out
    status, out, _ = run(capsys, "cache", "list", "--json")
    [listed] = json.loads(out)
    assert listed["keys"] == 1 and listed["function"].endswith("saxpy")
    status, out, _ = run(capsys, "cache", "show", "saxpy", "--json")
    [shown] = json.loads(out)
    assert len(shown["results"]) == len(tuned_saxpy.variants)
    status, out, _ = run(capsys, "cache", "show", "saxpy")
    assert status == 0 and "BLOCK=128, ITEMS=1" in out and "*" in out


def test_export_clear_import_round_trip_answers_from_disk(
    capsys, tmp_path, tuned_saxpy, monkeypatch
):
    shipped = tmp_path / "tuned.json"
    assert run(capsys, "cache", "export", str(shipped))[0] == 0
    assert run(capsys, "cache", "clear")[0] == 0
    assert json.loads(run(capsys, "cache", "list", "--json")[1]) == []
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert status == 0 and "imported 1" in err
    forget_shared_state(monkeypatch)
    fresh = _saxpy()  # a new kernel object, as in a new process
    x = cuda.to_device(np.ones(100, np.float32))
    report = fresh.tune(np.float32(2.0), x, x, cuda.device_array(100, np.float32))
    assert report.source == "disk" and fresh.stats["benchmarks"] == 0
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert "imported 0" in err and "1 already in the cache" in err


def test_import_skips_other_devices_and_refuses_bad_files(capsys, tmp_path, tuned_saxpy):
    shipped = tmp_path / "tuned.json"
    cachefile.export(nt.settings.cache_dir, shipped)
    document = json.loads(shipped.read_text())
    document["entries"][0]["device"] = "Another_GPU-sm80-108sm"
    shipped.write_text(json.dumps(document))
    result = cachefile.import_file(shipped, tmp_path / "other-cache")
    assert (result.imported, result.other_device) == (0, 1)
    for text in ("not json", json.dumps({"format": "numbatune-cache", "version": 99})):
        shipped.write_text(text)
        status, _, err = run(capsys, "cache", "import", str(shipped))
        assert status == 1 and "numbatune cache:" in err
    document["entries"][0]["entry"]["best_index"] = 99
    shipped.write_text(json.dumps(document))
    with pytest.raises(nt.CacheFileError, match="an entry is not"):
        cachefile.import_file(shipped, tmp_path / "other-cache")
    assert not (tmp_path / "other-cache").exists()  # nothing was written


def test_report_prints_the_table_and_draws_a_heat_map(capsys, tmp_path, tuned_saxpy):
    picture = tmp_path / "saxpy.png"
    status, out, _ = run(capsys, "report", "saxpy", "-o", str(picture))
    assert status == 0 and "BLOCK=1024, ITEMS=8" in out
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_failures_exit_1_and_usage_errors_exit_2(capsys):
    status, _, err = run(capsys, "cache", "show", "no_such_kernel")
    assert status == 1 and "no stored result for no_such_kernel" in err
    with pytest.raises(SystemExit) as usage:
        main(["cache", "frobnicate"])
    assert usage.value.code == 2
