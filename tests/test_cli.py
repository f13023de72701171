"""The numbatune command: info, cache list/show/clear/export/import and report, as a user runs
them; data on stdout (tables or --json), messages on stderr, exit status 0/1/2."""

import itertools
import json
import re
import shlex
import warnings

import numpy as np
import pytest
from matplotlib import image, pyplot
from numba import cuda

import numbatune as nt
from numbatune import plot
from numbatune.arrays import SIMULATOR
from numbatune.cache import compiled
from numbatune.cache import files as cachefile
from numbatune.cli import main
from numbatune.devices import current_kind
from tests.kernels import forget_shared_state, load_example


def few_saxpy():
    """examples/saxpy.py's kernel, loaded afresh, over four variants (two block sizes, two
    items per thread): few, for the simulator."""
    saxpy = load_example("saxpy").saxpy
    return saxpy.with_variants(nt.product(BLOCK=[128, 1024], ITEMS=[1, 8], VEC=[1]))


def saxpy_arguments():
    x = cuda.to_device(np.ones(100, np.float32))
    return np.float32(2.0), x, x, cuda.device_array(100, np.float32)


@pytest.fixture
def tuned_saxpy():
    """saxpy tuned for one key, its result on disk."""
    saxpy = few_saxpy()
    saxpy.tune(*saxpy_arguments(), force=True)
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
    assert data["compilers"]["numba-cuda"] == data["versions"]["numba-cuda"]
    assert set(data["compilers"]) == {"numba-cuda", "numba-cuda-mlir"}
    status, out, _ = run(capsys, "info")
    assert status == 0 and "compiler numba-cuda " in out and "compiler numba-cuda-mlir " in out


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
    assert f"timed as {shown['timing']}" in out  # (under the simulator: the wall clock)


def test_cache_show_takes_a_key_as_printed(capsys, tuned_saxpy):
    x = cuda.to_device(np.ones(1000, np.float32))
    tuned_saxpy.tune(np.float32(2.0), x, x, cuda.device_array(1000, np.float32))
    status, out, _ = run(capsys, "cache", "show", "saxpy")
    printed = [re.split(r" {2,}", line)[0] for line in out.splitlines()[1:] if line[0] != " "]
    assert status == 0 and sorted(printed) == ["3 of 1024 float32 C", "3 of 128 float32 C"]
    for key in printed:
        for quoted in (f"'{key}'", f'"{key}"'):  # as a shell passes it on
            status, out, _ = run(capsys, *shlex.split(f"cache show saxpy {quoted}"))
            assert status == 0 and [line.split("  ")[0] for line in out.splitlines()[1:2]] == [key]
            assert sum(line[0] != " " for line in out.splitlines()) == 2  # the header, the key
    [stored] = json.loads(run(capsys, "cache", "show", "saxpy", printed[0], "--json")[1])
    status, out, _ = run(capsys, "cache", "show", "saxpy", stored["key"])  # as --json gives it
    assert status == 0 and out.splitlines()[1].startswith(printed[0])
    status, _, err = run(capsys, "cache", "show", "saxpy", "3 of 2048 float32 C")
    assert status == 2 and "saxpy has no stored key '3 of 2048 float32 C'" in error_line(err)


def test_json_keeps_the_types_of_parameter_values(capsys, tmp_path, tuned_saxpy):
    status, out, _ = run(capsys, "cache", "show", "saxpy", "--json")
    [shown] = json.loads(out)
    assert status == 0 and {r["params"]["BLOCK"] for r in shown["results"]} == {128, 1024}
    # Values of other types, as a kernel's variants may have them.
    shipped = tmp_path / "tuned.json"
    run(capsys, "cache", "export", str(shipped))
    document = json.loads(shipped.read_text())
    stored = document["entries"][0]["entry"]["results"][0]
    stored["params"] |= {"SPREAD": "True", "SCALE": "0.5", "ORDER": "'rows'", "TILE": "(4, 8)"}
    stored["jit"] = {"fastmath": "False"}
    shipped.write_text(json.dumps(document))
    run(capsys, "cache", "clear")
    run(capsys, "cache", "import", str(shipped))
    [shown] = json.loads(run(capsys, "cache", "show", "saxpy", "--json")[1])
    first = shown["results"][0]
    assert first["params"] == {
        "BLOCK": 128, "ITEMS": 1, "VEC": 1, "SPREAD": True, "SCALE": 0.5, "ORDER": "rows",
        "TILE": [4, 8],
    }  # fmt: skip
    assert first["jit"] == {"fastmath": False}


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
    fresh = few_saxpy()  # a new kernel object, as in a new process
    report = fresh.tune(*saxpy_arguments())
    assert report.source == "disk" and fresh.stats["benchmarks"] == 0
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert "imported 0" in err and "1 already in the cache" in err


def test_cache_clear_of_one_function_deletes_its_compiled_kernels_and_no_others(
    capsys, numbatune_cache
):
    saxpy = "numbatune_examples.saxpy.saxpy"
    closure = f"{saxpy} [closure 0123abcd]"
    ids = [saxpy, closure, "numbatune_examples.transpose.transpose", f"{saxpy}_twice"]
    compiled.add(
        [compiled.Kernel("sm_90", f, "ab" * 20, b"a kernel") for f in ids], numbatune_cache
    )

    def kept():
        return {kernel.function for kernel in compiled.stored(numbatune_cache, ids)}

    assert run(capsys, "cache", "clear", "ample")[0] == 0  # a part of two names: neither's
    assert kept() == set(ids)
    assert run(capsys, "cache", "clear", "saxpy")[0] == 0  # its last part: it and its closure
    assert kept() == set(ids) - {saxpy, closure}


def test_cache_clear_of_one_function_reads_each_stored_entry_once(capsys, tuned_saxpy, monkeypatch):
    """Clearing a function reads the cache's entries once, both to tell which are its own
    and to delete them."""
    x = cuda.to_device(np.ones(1000, np.float32))
    tuned_saxpy.tune(np.float32(2.0), x, x, cuda.device_array(1000, np.float32))  # a 2nd key
    read = []
    reader = cachefile._read

    def counted(device, directory, stored_under, text):
        read.append(stored_under)
        return reader(device, directory, stored_under, text)

    monkeypatch.setattr(cachefile, "_read", counted)
    assert run(capsys, "cache", "clear", "saxpy")[0] == 0
    assert len(read) == len(set(read)) >= 2
    monkeypatch.undo()
    assert stored_saxpy() == []


def test_export_of_an_unknown_function_fails_and_leaves_the_file_as_it_was(
    capsys, tmp_path, tuned_saxpy
):
    shipped = tmp_path / "tuned.json"
    assert run(capsys, "cache", "export", str(shipped))[0] == 0
    before = shipped.read_text()
    status, _, err = run(capsys, "cache", "export", str(shipped), "--function", "no_such_kernel")
    assert status == 2 and "no stored result for no_such_kernel" in error_line(err)
    assert shipped.read_text() == before


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
        assert status == 2 and str(shipped) in error_line(err)
    document["entries"][0]["entry"]["best_index"] = 99
    shipped.write_text(json.dumps(document))
    with pytest.raises(nt.CacheFileError, match="an entry is not"):
        cachefile.import_file(shipped, tmp_path / "untouched-cache")
    assert not (tmp_path / "untouched-cache").exists()  # nothing was written


def stored_saxpy():
    return cachefile.stored_entries(nt.settings.cache_dir, "saxpy")


def test_report_prints_the_table_and_draws_a_heat_map_the_winner_marked(
    capsys, tmp_path, tuned_saxpy
):
    picture = tmp_path / "saxpy.png"
    with warnings.catch_warnings():  # (the report's, not the tuning's: numba's occupancy note)
        warnings.simplefilter("error")
        status, out, _ = run(capsys, "report", "saxpy", "-o", str(picture))
        [entry] = stored_saxpy()
        figure = plot.draw([entry])
    assert status == 0 and "BLOCK=1024, ITEMS=8" in out
    assert picture.read_bytes()[:4] == b"\x89PNG"
    heat_map, _ = figure.axes  # and its colour bar
    [outline] = heat_map.patches
    best = entry.stored["results"][entry.stored["best_index"]]["params"]
    row = ["128", "1024"].index(best["BLOCK"])
    column = ["1", "8"].index(best["ITEMS"])
    assert outline.get_xy() == (column - 0.5, row - 0.5)
    assert [t.get_text() for t in heat_map.texts] == ["winner"]
    pyplot.close(figure)


def _long_labelled_results(timed: dict) -> list[dict]:
    """32 results of variants of examples/sgemm.py's kind (their labels as long), from one."""
    results = []
    for i, (bm, bn, bk, tm, spread) in enumerate(
        itertools.product([64, 128], [64, 128], [8, 16], [4, 8], [False, True])
    ):
        threads = bm * bn // tm // tm
        params = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tm, "SPREAD": spread,
                  "THREADS": threads, "LOADS_A": bm * bk // threads,
                  "LOADS_B": bk * bn // threads}  # fmt: skip
        texts = {name: repr(value) for name, value in params.items()}
        jit = {"max_registers": "128"} if threads == 256 else {}
        label = ", ".join(f"{name}={text}" for name, text in {**texts, **jit}.items())
        results.append(
            {**timed, "variant": label, "params": texts, "jit": jit, "median_s": (1 + i % 7) / 1e2}
        )
    results[3] |= {"status": "failed", "median_s": None, "spread_s": None, "runs": 0,
                   "error": "boom"}  # fmt: skip
    return results


def test_report_picture_of_long_labels_warns_of_nothing_and_cuts_no_label(
    capsys, tmp_path, tuned_saxpy
):
    shipped = tmp_path / "tuned.json"
    run(capsys, "cache", "export", str(shipped))
    document = json.loads(shipped.read_text())
    entry = document["entries"][0]["entry"]
    entry["results"] = _long_labelled_results(entry["results"][0])
    entry["best_index"] = 7
    shipped.write_text(json.dumps(document))
    run(capsys, "cache", "clear")
    run(capsys, "cache", "import", str(shipped))
    picture = tmp_path / "times.png"
    with warnings.catch_warnings():  # (the report's, not the tuning's: numba's occupancy note)
        warnings.simplefilter("error")
        assert run(capsys, "report", "saxpy", "-o", str(picture))[0] == 0
        figure = plot.draw(stored_saxpy())
        figure.canvas.draw()
    [bars] = figure.axes
    colours = [tuple(bar.get_facecolor()) for bar in bars.patches]
    assert [i for i, c in enumerate(colours) if colours.count(c) == 1] == [7]  # the winner's
    texts = [t.get_text().strip() for t in bars.texts]
    # Times of 10 to 70 ms read as such, with no offset or power of ten on the axis; the
    # simulator's are said to be.
    assert texts[0] == "failed" and texts[1] == "winner, 10 ms"
    assert bars.get_xlabel() == "median time (ms)" and not bars.xaxis.get_offset_text().get_text()
    title = bars.get_title(loc="left").replace("\n", " ")
    assert title.endswith("(numba's simulator: times mean nothing)" if SIMULATOR else ")")
    drawn = figure.get_tightbbox()  # inches, every label and title
    height, width = image.imread(picture).shape[:2]
    assert width >= drawn.width * figure.dpi and height >= drawn.height * figure.dpi
    pyplot.close(figure)


def error_line(err: str) -> str:
    """The one line a mistake ends in (asserted to be one, and numbatune's)."""
    [line] = err.strip().splitlines()
    assert line.startswith("numbatune: error: ")
    return line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["compile", "nonexist.py", "--cc", "9.0"], "nonexist.py: no such file"),
        (["cache", "show", "no_such_kernel"], "no stored result for no_such_kernel"),
        (["report", "no_such_kernel"], "no stored result for no_such_kernel"),
        (["cache", "import", "nonexist.json"], "nonexist.json"),
        (["cache", "export", "{tmp}/missing/tuned.json"], "there is no folder {tmp}/missing"),
        (["cache", "export", "{tmp}"], "it is a folder"),
        (["report", "saxpy", "-o", "{tmp}/missing/times.png"], "there is no folder"),
        (["report", "saxpy", "-o", "{tmp}"], "it is a folder"),
        (["sweep", "{tmp}/record.jsonl", "-o", "{tmp}/missing/out.json"], "no folder"),
        (["demo", "--examples", "{tmp}/missing"], "{tmp}/missing: no such folder"),
        (["demo", "--examples", "{tmp}"], "no example functions found"),
        (["report", "saxpy", "-o", "{tmp}/times.xyz"], "cannot draw {tmp}/times.xyz"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_mistakes_end_in_one_line_and_status_2(capsys, tmp_path, argv, says):
    status, out, err = run(capsys, *[word.format(tmp=tmp_path) for word in argv])
    assert status == 2 and out == ""
    assert says.format(tmp=tmp_path) in error_line(err)


def test_report_refuses_a_picture_file_with_no_suffix_and_writes_nothing(
    capsys, tmp_path, tuned_saxpy
):
    status, out, err = run(capsys, "report", "saxpy", "-o", str(tmp_path / "times"))
    assert status == 2 and out == ""
    line = error_line(err)
    assert f"cannot draw {tmp_path / 'times'}: it has no suffix" in line
    assert "-o FILE" in line and all(f" {name}" in line for name in ("pdf,", "png,", "svg,"))
    assert list(tmp_path.glob("times*")) == []


@pytest.mark.parametrize("workers", ["-1", "0", "two"])
@pytest.mark.parametrize(
    "command", [["compile", "kernels.py", "--cc", "9.0"], ["sweep", "-o", "x"]]
)
def test_workers_that_are_not_a_positive_integer_are_refused_before_anything_runs(
    capsys, monkeypatch, command, workers
):
    monkeypatch.setattr("numbatune.cli._compile", lambda arguments: pytest.fail("it ran"))
    monkeypatch.setattr("numbatune.cli._sweep", lambda arguments: pytest.fail("it ran"))
    with pytest.raises(SystemExit) as usage:
        main([*command, "--workers", workers])
    assert usage.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.endswith(f"error: argument --workers: expected a positive integer, as 4, "
                         f"got {workers!r}")  # fmt: skip


def test_bugs_still_show_their_traceback(monkeypatch):
    def broken(arguments):
        raise KeyError("a bug")

    monkeypatch.setattr("numbatune.cli._info", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["info"])


def test_usage_errors_exit_2():
    with pytest.raises(SystemExit) as usage:
        main(["cache", "frobnicate"])
    assert usage.value.code == 2
