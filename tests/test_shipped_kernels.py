"""Exports that carry compiled kernels: ``numbatune cache export`` writes the kernels the kernel
store keeps for the exported functions, ``numbatune cache import`` puts them into the importing
cache's store, checked first. The kernels are compiled for sm_90 here, with no GPU, as
``numbatune compile`` does; the GPU story (a fresh process compiles nothing) is in
tests/test_sweep.py."""

import base64
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import processes
from numbatune.cache import files
from numbatune.cache.disk import KERNELS, Folder
from numbatune.compile.store import KernelStore, kernels_folder
from numbatune.demo import load_module
from numbatune.identity import folder_name
from numbatune.precompile import precompile
from tests.test_cli import error_line, run
from tests.test_precompile import CLI_MODULE

pytestmark = pytest.mark.skipif(not processes.available(), reason="worker processes need POSIX")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A cache with one tuned key of ``doubled`` and its two kernels compiled for sm_90."""
    folder = tmp_path_factory.mktemp("source")
    (folder / "shipped_kernels.py").write_text(CLI_MODULE)  # doubled, two kernels
    doubled = load_module(folder / "shipped_kernels.py").doubled
    cache, previous = folder / "cache", nt.settings.cache_dir
    nt.configure(cache_dir=cache)
    try:
        args = (cuda.to_device(np.zeros(8, np.float32)),)
        doubled.tune(*args)
        built = precompile([(doubled, args)], (9, 0), cache, workers=1)
    finally:
        nt.configure(cache_dir=previous)
    assert [b.error for b in built] == [None, None]
    return SimpleNamespace(cache=cache, function=doubled.function_id)


@pytest.fixture
def cache(source, numbatune_cache):
    """The cache numbatune uses, holding a copy of ``source``'s."""
    shutil.copytree(source.cache, numbatune_cache)
    return numbatune_cache


def stored_kernels(cache_dir, function, cc=(9, 0)):
    """The kernels the store under ``cache_dir`` keeps for ``function``, by key (not its
    notes of the kernels that ran, which tuning on a GPU leaves)."""
    folder = kernels_folder(cache_dir, cc) / folder_name(function)
    if not folder.is_dir():
        return {}
    disk = Folder(folder, function, KERNELS)
    stored = {key: disk.get(key) for key in disk.stored_keys()}
    return {key: value for key, value in stored.items() if isinstance(value, bytes)}


def exported(capsys, path, *options):
    status, _, err = run(capsys, "cache", "export", str(path), *options)
    assert status == 0, err
    return json.loads(path.read_text()), err


def test_an_export_carries_its_kernels_and_an_import_stores_them_byte_for_byte(
    source, cache, tmp_path, capsys
):
    shipped = tmp_path / "tuned.json"
    document, err = exported(capsys, shipped)
    assert "exported 1 stored results and 2 compiled kernels" in err
    compiled = stored_kernels(source.cache, source.function)
    assert len(compiled) == 2
    kernels = document["kernels"]
    assert {(k["arch"], k["function"]) for k in kernels} == {("sm_90", source.function)}
    assert {k["key"]: base64.b64decode(k["payload"]) for k in kernels} == compiled
    assert run(capsys, "cache", "clear")[0] == 0
    assert stored_kernels(cache, source.function) == {}
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert status == 0 and "imported 1;" in err
    assert "imported 2 compiled kernels (0 already in the store)" in err
    assert stored_kernels(cache, source.function) == compiled
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert status == 0 and "imported 0 compiled kernels (2 already in the store)" in err


def test_no_kernels_leaves_them_out_of_the_export(source, cache, tmp_path, capsys):
    document, err = exported(capsys, tmp_path / "tuned.json", "--no-kernels")
    assert document["kernels"] == [] and len(document["entries"]) == 1
    assert "exported 1 stored results and 0 compiled kernels" in err
    written, _ = files.export(cache, tmp_path / "api.json", kernels=False)
    assert (written.results, written.kernels) == (1, 0)


def _cut_short(kernel):
    kernel["payload"] = kernel["payload"][:-8]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_cut_short, "compiled kernel #0 (sm_90, "),
        (_cut_short, "its payload does not match its sha256"),
        (lambda k: k.update(payload="not base64!"), "its payload is not base64"),
        (lambda k: k.update(arch="../../elsewhere"), "arch is '../../elsewhere', expected sm_"),
        (lambda k: k.update(key="ran 1234"), "key is 'ran 1234', expected the kernel store's"),
        (lambda k: k.update(function=3), "function is 3, expected text"),
        (lambda k: k.pop("sha256"), "sha256 is None, expected text"),
    ],
)
def test_a_damaged_kernel_is_refused_in_one_line_and_nothing_is_imported(
    source, cache, tmp_path, capsys, damage, says
):
    shipped = tmp_path / "tuned.json"
    document, _ = exported(capsys, shipped)
    damage(document["kernels"][-1])
    document["kernels"].reverse()  # the damaged one first: the other is not written either
    shipped.write_text(json.dumps(document))
    run(capsys, "cache", "clear")
    status, _, err = run(capsys, "cache", "import", str(shipped))
    assert status == 2 and str(shipped) in error_line(err) and says in error_line(err)
    assert stored_kernels(cache, source.function) == {}
    assert files.stored_entries(cache) == []


def test_a_kernels_section_that_is_not_a_list_is_refused(source, cache, tmp_path, capsys):
    shipped = tmp_path / "tuned.json"
    document, _ = exported(capsys, shipped)
    shipped.write_text(json.dumps({**document, "kernels": {"sm_90": []}}))
    with pytest.raises(nt.CacheFileError, match="kernels is dict, expected a list"):
        files.import_file(shipped, tmp_path / "other-cache")
    assert not (tmp_path / "other-cache").exists()


def test_kernels_of_another_compute_capability_are_kept_in_their_folder_and_never_loaded(
    source, cache, tmp_path, capsys
):
    shipped = tmp_path / "tuned.json"
    document, _ = exported(capsys, shipped)
    for kernel in document["kernels"]:
        kernel["arch"] = "sm_80"
    shipped.write_text(json.dumps(document))
    fresh = tmp_path / "fresh"
    result = files.import_file(shipped, fresh)
    assert (result.imported, result.kernels_imported) == (1, 2)
    assert stored_kernels(fresh, source.function, (8, 0)) == stored_kernels(cache, source.function)
    assert stored_kernels(fresh, source.function) == {}
    store = KernelStore(fresh, (9, 0), source.function)
    assert [store.load(kernel["key"]) for kernel in document["kernels"]] == [None, None]


def test_an_export_written_before_kernels_were_shipped_still_imports(
    source, cache, tmp_path, capsys
):
    shipped = tmp_path / "tuned.json"
    document, _ = exported(capsys, shipped)
    del document["kernels"]
    shipped.write_text(json.dumps(document))
    result = files.import_file(shipped, tmp_path / "fresh")
    assert (result.imported, result.kernels_imported, result.not_written) == (1, 0, 0)
