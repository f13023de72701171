"""Tuning levels, priorities and pruning: which variants a key's tuning tries."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.tuning import bench, levels, tuner
from numbatune.tuning.results import Timed
from tests import kernels
from tests.test_search import arguments, cost, shift

#: Four priority groups: BLOCK=8 alone on top, then 4, then 2 and 16 together, then 1.
PRIORITIES = {8: 3, 4: 2, 2: 1, 16: 1, 1: 0}
TRIED_FIRST = {
    "minimal": [8],
    "balanced": [8, 4],
    "extensive": [8, 4, 2, 16],
    "full": [8, 4, 2, 16, 1],
}


def accumulate(blocks=(1, 2, 4, 8, 16), priority=lambda BLOCK: PRIORITIES[BLOCK], **options):
    return nt.autotune(
        variants=nt.product(BLOCK=list(blocks), priority=priority),
        launch=kernels.accumulate_launch,
        **options,
    )(kernels.accumulate)


def arrays(n=16):
    a = cuda.to_device(np.arange(n, dtype=np.float32))
    return a, cuda.to_device(np.zeros(n, np.float32))


def tried(report):
    return sorted(r.params["BLOCK"] for r in report.results if r.median_s is not None)


@pytest.mark.parametrize("level", list(TRIED_FIRST))
def test_each_level_measures_its_priority_groups_and_the_winner_computes(level):
    tuned = accumulate(level=level)
    a, out = arrays()
    report = tuned.tune(a, out)
    expected = TRIED_FIRST[level]
    assert tried(report) == (sorted(expected) if len(expected) > 1 else [])
    assert report.best["BLOCK"] in expected
    assert [r.params["BLOCK"] for r in report.results] == [1, 2, 4, 8, 16]
    tuned(a, out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(16))


def test_minimal_with_one_top_variant_launches_it_without_measuring():
    report = accumulate(level="minimal").tune(*arrays())
    assert report.source == "single" and report.best == {"BLOCK": 8}


def test_the_level_setting_applies_when_the_kernel_names_none():
    before = nt.settings.level
    nt.configure(level="balanced")
    try:
        report = accumulate().tune(*arrays())
    finally:
        nt.configure(level=before)
    assert tried(report) == [4, 8]


def test_without_priorities_every_level_tries_every_variant():
    report = accumulate(priority=None, level="minimal").tune(*arrays())
    assert tried(report) == [1, 2, 4, 8, 16]


def test_a_priority_computed_from_the_key_reorders_the_groups():
    def prefer_blocks_near_the_size(BLOCK):
        return lambda key: -abs(BLOCK - key[0][0][0])  # the anchored length of `a`

    tuned = accumulate(priority=prefer_blocks_near_the_size, level="balanced")
    assert tried(tuned.tune(*arrays(16))) == [8, 16]
    assert tried(tuned.tune(*arrays(2))) == [1, 2]


def test_prune_sees_the_key_and_only_its_variants_are_tried():
    seen = []

    def prune(key, variants):
        seen.append((key, [v.params["BLOCK"] for v in variants]))
        return [v for v in variants if v.params["BLOCK"] <= 4]

    report = accumulate(priority=None, prune=prune).tune(*arrays())
    assert tried(report) == [1, 2, 4]
    assert seen[0][1] == [1, 2, 4, 8, 16] and seen[0][0] == report.key


def test_a_pruned_variant_is_never_compiled():
    """REPS=None fails to compile; pruned away, it leaves no error behind."""
    tuned = nt.autotune(
        variants=nt.product(REPS=[None, 1, 2]),
        launch=lambda a, out: (1, a.shape[0]),
        prune=lambda key, variants: [v for v in variants if v.params["REPS"] is not None],
    )(kernels.repeated_sine)
    report = tuned.tune(*arrays(4))
    assert all(r.error is None for r in report.results)
    assert report.results[0].median_s is None


def test_when_the_top_groups_all_fail_the_next_group_is_tried():
    tuned = nt.autotune(
        variants=[
            nt.Variant({"REPS": None}, priority=2),
            nt.Variant({"REPS": "two"}, priority=2),
            nt.Variant({"REPS": 1}, priority=1),
            nt.Variant({"REPS": 2}, priority=0),
        ],
        launch=lambda a, out: (1, a.shape[0]),
        level="minimal",
    )(kernels.repeated_sine)
    report = tuned.tune(*arrays(4))
    assert report.best == {"REPS": 1}
    assert [r.error is not None for r in report.results] == [True, True, False, False]
    assert report.results[3].median_s is None  # the last group was not needed


def test_a_lone_top_variant_that_fails_gives_way_to_the_next_group():
    tuned = nt.autotune(
        variants=[nt.Variant({"REPS": None}, priority=1), nt.Variant({"REPS": 1})],
        launch=lambda a, out: (1, a.shape[0]),
        level="minimal",
    )(kernels.repeated_sine)
    a, out = arrays(4)
    assert tuned.tune(a, out).best == {"REPS": 1}
    tuned(a, out)
    np.testing.assert_allclose(out.copy_to_host(), np.sin(np.arange(4)) + np.arange(4), rtol=1e-6)


def test_when_every_group_fails_the_error_names_every_variant():
    tuned = nt.autotune(
        variants=[nt.Variant({"REPS": None}, priority=1), nt.Variant({"REPS": "two"})],
        launch=lambda a, out: (1, a.shape[0]),
        level="minimal",
    )(kernels.repeated_sine)
    with pytest.raises(nt.TuningError, match=r"(?s)REPS=None.*REPS='two'"):
        tuned.tune(*arrays(4))


def test_a_result_tuned_at_minimal_is_tuned_again_at_full_but_full_serves_minimal():
    a, out = arrays()
    assert accumulate(level="balanced").tune(a, out).source == "benchmark"
    at_full = accumulate(level="full").tune(a, out)
    assert at_full.source == "benchmark" and tried(at_full) == [1, 2, 4, 8, 16]
    at_minimal = accumulate(level="minimal").tune(a, out)
    assert at_minimal.source == "disk"
    assert at_minimal.best_index == at_full.best_index


@pytest.fixture
def searched_in_new_processes(monkeypatch, numbatune_cache):
    """``search(level, priority)``: the report of a pattern search of 512 variants in two
    priority groups of 256 (D of 16 or 32 first, unless ``priority`` says otherwise), each in a
    new process sharing the disk cache. The times are test_search's fake ones, 100 us more for
    D of 16 or 32: every variant of D of 64 or 128 is faster than all of them."""

    def measure(runs, stream=0, inputs=(), restore=lambda: None, rounds=None, taken=None):
        return {v: Timed((cost(v) + 100 * (v.params["D"] <= 32)) * 1e-6, 0.0, 10) for v in runs}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(tuner, "_screening", lambda variants: False)

    def top_group(D, **others):
        return 1 if D <= 32 else 0

    def search(level, priority=top_group):
        kernels.forget_shared_state(monkeypatch)
        return nt.autotune(
            variants=nt.product(
                A=range(8), B=range(8), C=range(2), D=[16, 32, 64, 128], priority=priority
            ),
            launch=lambda x, out: (1, 32),
            search="pattern",
            budget=20,
            level=level,
        )(shift).tune(*arguments())

    return search


def test_a_search_at_minimal_is_searched_again_at_full_and_one_at_full_serves_minimal(
    searched_in_new_processes,
):
    search = searched_in_new_processes
    at_minimal = search("minimal")
    assert at_minimal.space == 256
    assert {r.params["D"] for r in at_minimal.results if r.tried} <= {16, 32}
    at_full = search("full")
    assert at_full.source == "benchmark" and at_full.space == 512
    assert at_full.best["D"] in (64, 128)  # from the group minimal left out
    again = search("minimal")
    assert again.source == "disk" and again.best == at_full.best


def test_a_search_of_another_top_group_of_the_same_size_does_not_serve_minimal(
    searched_in_new_processes,
):
    search = searched_in_new_processes
    at_minimal = search("minimal")
    assert at_minimal.best["D"] in (16, 32)
    # Now D of 64 or 128 is the top group: the stored search tried none of them.
    again = search("minimal", priority=lambda D, **others: 1 if D >= 64 else 0)
    assert again.source == "benchmark" and again.space == 256
    assert again.best["D"] in (64, 128)


def test_a_stored_winner_that_prune_now_removes_is_not_used():
    a, out = arrays()
    full = accumulate(priority=None).tune(a, out)
    winner = full.best["BLOCK"]
    pruned = accumulate(
        priority=None, prune=lambda key, vs: [v for v in vs if v.params["BLOCK"] != winner]
    ).tune(a, out)
    assert pruned.source == "disk" and pruned.best["BLOCK"] != winner


def test_a_stored_winner_stays_the_winner_even_when_another_variant_ties_with_it():
    """Event timings are coarse: equal medians happen, and tuning broke the tie already."""
    variants = nt.product(B=[1, 2])
    timed = Timed(2e-6, 0.0, 10)
    stored = nt.TuneReport(
        "key", 1, nt.Source.DISK, tuple(nt.VariantResult(v, timed) for v in variants)
    )
    assert levels.reuse(stored, levels.plan("k", "key", variants, "full")).best_index == 1


def test_plan_groups_by_priority_highest_first_and_keeps_the_kernel_order_within():
    variants = nt.product(B=[1, 2, 3, 4], priority=lambda B: B % 2)
    planned = levels.plan("k", None, variants, "minimal")
    assert [[v.params["B"] for v in g] for g in planned.groups] == [[1, 3], [2, 4]]
    assert [len(s) for s in planned.tries()] == [2, 4]


def test_variants_differing_only_in_priority_are_one_variant():
    assert nt.Variant({"B": 1}, priority=5) == nt.Variant({"B": 1})
    assert repr(nt.Variant({"B": 1}, priority=5)) == "Variant(B=1, priority=5)"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: accumulate(level="fast"), "level must be one of minimal, balanced"),
        (lambda: accumulate(prune=[1]), "prune must be a function"),
        (lambda: nt.Variant({"B": 1}, priority="high"), "priority must be an integer"),
        (lambda: nt.product(B=[1], priority=3), "priority must be a function"),
        (lambda: nt.configure(level="fast"), "setting level .*must be one of"),
    ],
)
def test_bad_levels_priorities_and_prunes_are_refused_clearly(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()


@pytest.mark.parametrize(
    ("prune", "message"),
    [
        (lambda key, vs: [], "prune removed every variant"),
        (lambda key, vs: [nt.Variant({"BLOCK": 3})], "not variants of the kernel"),
        (lambda key, vs: None, "prune must return a list"),
    ],
)
def test_bad_prune_results_are_refused_clearly(prune, message):
    with pytest.raises((TypeError, ValueError), match=message):
        accumulate(prune=prune).tune(*arrays())


def test_a_priority_function_must_return_an_integer():
    tuned = accumulate(priority=lambda BLOCK: lambda key: "high")
    with pytest.raises(TypeError, match="priority function returned 'high'"):
        tuned.tune(*arrays())
