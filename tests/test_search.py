"""Search strategies over spaces too large to measure whole, with fake, deterministic times."""

import json
import logging
import random

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.cache.tunecache import function_folder
from numbatune.config import load_environment
from numbatune.devices import current_kind
from numbatune.tuning import bench, search, tuner
from numbatune.tuning.grid import Grid
from numbatune.tuning.results import Timed
from tests.kernels import forget_shared_state

A, B, C, D = 3, 5, 2, 64  # the kernel as written: its module's values


@cuda.jit
def shift(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i] + A + B + C + D


def space(where=lambda A, B, **rest: A + B < 14):
    """1024 combinations, less those the filter removes."""
    return nt.product(A=range(8), B=range(8), C=range(4), D=[16, 32, 64, 128], where=where)


def cost(variant, best=(6, 1, 3, 32)):
    """A fake time (us) with one minimum, away from the kernel as written."""
    a, b, c, d = (variant.params[name] for name in "ABCD")
    return (
        10
        + (a - best[0]) ** 2
        + (b - best[1]) ** 2
        + 0.5 * (c - best[2]) ** 2
        + abs(np.log2(d) - np.log2(best[3]))
    )


@pytest.fixture
def fake_times(monkeypatch):
    """Tuning measures with ``cost`` instead of a stopwatch; each measured batch is kept. The
    variants of a batch are measured once they have all compiled, as under the simulator (on
    a GPU, screening them while they compile is test_screen's)."""
    batches = []

    def measure(runs, stream=0, inputs=(), restore=lambda: None, rounds=None, taken=None):
        batches.append(list(runs))
        return {variant: Timed(cost(variant) * 1e-6, 0.0, 10) for variant in runs}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(tuner, "_screening", lambda variants: False)
    forget_shared_state(monkeypatch)
    return batches


def tuned(variants=None, **options):
    return nt.autotune(
        variants=space() if variants is None else variants,
        launch=lambda x, out: (1, 32),
        **options,
    )(shift)


def arguments(n=32):
    return cuda.to_device(np.ones(n, np.float32)), cuda.to_device(np.zeros(n, np.float32))


def fastest(variants):
    """The variant of least ``cost``, the first in the kernel's order among equals (as tuning
    picks it)."""
    order = {v: i for i, v in enumerate(space())}
    return min(variants, key=lambda v: (cost(v), order[v]))


def tried(report):
    return [r.variant for r in report.results if r.tried]


# -- the strategies, alone ----------------------------------------------------------------------


def test_a_grid_orders_numbers_and_steps_over_values_a_filter_removed():
    variants = nt.product(X=[4, 1, 2, 8], Y=["a", "b"], where=lambda X, Y: (X, Y) != (2, "a"))
    grid = Grid(variants)
    one_a = nt.Variant({"X": 1, "Y": "a"})
    # X=2 with Y="a" is filtered out: the nearest point beyond it along X is X=4.
    assert set(grid.neighbours(one_a)) == {
        nt.Variant({"X": 4, "Y": "a"}),
        nt.Variant({"X": 1, "Y": "b"}),
    }
    assert set(grid.neighbours(one_a, step=2)) == {nt.Variant({"X": 4, "Y": "a"})}


def test_a_grid_steps_along_parameters_that_others_do_not_determine():
    # THREADS follows from BM and TM: a step in BM (or TM) changes it too, and is a neighbour.
    variants = [
        nt.Variant(dict(BM=bm, TM=tm, SPREAD=spread, THREADS=bm // tm))
        for bm in (32, 64, 128) for tm in (2, 4) for spread in (False, True)
    ]  # fmt: skip
    grid = Grid(variants)
    start = next(v for v in variants if v.params == dict(BM=64, TM=2, SPREAD=False, THREADS=32))
    near = {(v.params["BM"], v.params["TM"], v.params["SPREAD"]) for v in grid.neighbours(start)}
    assert near == {(32, 2, False), (128, 2, False), (64, 4, False), (64, 2, True)}


def test_a_grid_spreads_a_batch_over_the_whole_space():
    variants = space()
    grid = Grid(variants)
    picked = grid.spread(variants, 16, random.Random(0))
    assert len(set(picked)) == 16
    for name in "ABCD":  # each axis's ends, where a random batch leaves them to chance
        values = [v.params[name] for v in picked]
        assert min(values) == min(v.params[name] for v in variants)
        assert max(values) == max(v.params[name] for v in variants)
    assert not {n for v in picked for n in grid.neighbours(v)} & set(picked)
    start = picked[0]  # away from what was chosen before, too
    assert start not in grid.spread(variants, 15, random.Random(0), [start])


def test_random_search_draws_the_same_variants_for_the_same_seed_and_key():
    variants = space()

    def drawn(seed, key):
        proposer = search.proposer(
            nt.Strategy.RANDOM, variants, [], search.randomness_for(seed, key), batch=16
        )
        return proposer.propose({}, None, 16) + proposer.propose({}, None, 16)

    assert drawn(0, "(1024,)") == drawn(0, "(1024,)")
    assert drawn(0, "(1024,)") != drawn(1, "(1024,)")
    assert drawn(0, "(1024,)") != drawn(0, "(2048,)")
    assert len(set(drawn(0, "(1024,)"))) == 32


SEARCHES = [nt.Strategy.RANDOM, nt.Strategy.PATTERN, nt.Strategy.MODEL]


@pytest.mark.parametrize("strategy", SEARCHES)
def test_a_search_proposes_every_variant_once_and_starts_where_it_is_told(strategy):
    variants = space()
    start = nt.Variant({"A": 7, "B": 0, "C": 1, "D": 16})
    proposer = search.proposer(strategy, variants, [start], random.Random(0), batch=24)
    proposed, times, best = [], {}, None
    while batch := proposer.propose(times, best, 24):
        proposed += batch
        times.update({v: cost(v) for v in batch})
        best = min(times, key=times.get)
    assert proposed[0] == start
    assert len(proposed) == len(set(proposed)) == len(variants)


def test_a_pattern_search_walks_from_its_start_to_the_minimum():
    variants = space()
    start = nt.Variant({"A": 3, "B": 5, "C": 2, "D": 64})
    proposer = search.proposer(nt.Strategy.PATTERN, variants, [start], random.Random(0), batch=8)
    times, best = {}, None
    while len(times) < 80 and (batch := proposer.propose(times, best, 8)):
        times.update({v: cost(v) for v in batch})
        best = min(times, key=times.get)
    assert best == nt.Variant({"A": 6, "B": 1, "C": 3, "D": 32})


def test_a_model_search_steps_to_the_bests_neighbours_and_lets_the_model_pick_the_rest():
    variants = space()
    grid = Grid(variants)
    proposer = search.proposer(nt.Strategy.MODEL, variants, [], random.Random(0), batch=24)
    times = {v: cost(v) for v in proposer.propose({}, None, 24)}
    for _ in range(3):
        best = min(times, key=times.get)
        batch = proposer.propose(times, best, 24)
        near = [v for v in grid.neighbours(best) if v not in times]
        assert len(batch) == 24 and batch[: len(near)] == near
        times.update({v: cost(v) for v in batch})


def test_a_pattern_search_fills_its_batches_with_the_runners_ups_neighbours():
    variants = space()
    grid = Grid(variants)
    start = nt.Variant({"A": 3, "B": 5, "C": 2, "D": 64})
    proposer = search.proposer(nt.Strategy.PATTERN, variants, [start], random.Random(0), batch=24)
    times = {v: cost(v) for v in proposer.propose({}, None, 24)}
    for _ in range(3):
        best = min(times, key=times.get)
        batch = proposer.propose(times, best, 24)
        assert len(batch) == 24  # more than the best's 8 neighbours
        near = {n for v in times for n in grid.neighbours(v)}  # none drawn at random
        assert set(batch) <= near | {n for step in (2, 4, 8) for n in grid.neighbours(best, step)}
        times.update({v: cost(v) for v in batch})


# -- searches in a tuning -----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["pattern", "model"])
def test_a_large_space_is_searched_within_the_budget_and_finds_the_best(fake_times, strategy):
    variants = space()
    report = tuned(search=strategy, budget=80).tune(*arguments())
    assert report.strategy == strategy and report.space == len(variants) == 1008
    assert report.tried <= 80 and report.best == {"A": 6, "B": 1, "C": 3, "D": 32}
    assert report.tuning_s == report.compile_s + report.trial_s + report.benchmark_s
    first = fake_times[0]
    # The kernel as written is measured first thing (on a GPU, compiled variants come back in
    # the order they finish compiling, so not necessarily at the head of the batch).
    assert nt.Variant({"A": 3, "B": 5, "C": 2, "D": 64}) in first
    # Each later batch is measured with the best so far, so decisions compare one measurement.
    for number, batch in enumerate(fake_times[1:], start=1):
        best_so_far = fastest(v for earlier in fake_times[:number] for v in earlier)
        assert best_so_far in batch


@pytest.mark.parametrize("strategy", SEARCHES)
def test_a_search_measures_the_variants_built_with_those_it_proposes(fake_times, strategy):
    # Variants that differ only in a register cap share one numba compile (a link each): a
    # search measures them together, and proposes none of them again.
    caps = [None, 32, 64]
    variants = nt.product(A=range(8), B=range(8), C=[2], D=[64], jit={"max_registers": caps})
    report = tuned(variants, search=strategy, budget=90).tune(*arguments())
    assert report.tried == 90
    measured, batches = set(), []
    searched = list(fake_times)
    if set(searched[-1]) <= {v for batch in searched[:-1] for v in batch}:
        searched.pop()  # the variants tied with the best (siblings of equal times), timed again
    for number, batch in enumerate(searched):
        again = [v for v in batch if v in measured]
        assert len(again) == (number > 0)  # the best so far, and no other, measured again
        batches.append([v for v in batch if v not in measured])
        measured.update(batch)
    for batch in batches[:-1]:  # (the last may stop at the budget)
        built = {(v.params["A"], v.params["B"]) for v in batch}
        assert len(batch) == len(caps) * len(built)  # each with its siblings
    assert len(measured) == 90


def test_auto_measures_small_spaces_whole_and_searches_large_ones_within_its_budget(fake_times):
    small = nt.product(A=range(4), B=range(5), C=[2], D=[64, 128])  # 40 variants
    report = tuned(small).tune(*arguments())
    assert report.strategy == "exhaustive" and report.tried == 40 and len(fake_times) == 1
    report = tuned().tune(*arguments())
    assert report.strategy == "pattern" and report.tried == 100  # the default budget


@pytest.mark.parametrize("strategy", ["random", "model"])
def test_the_same_seed_tries_the_same_variants_and_another_seed_others(
    fake_times, monkeypatch, strategy
):
    kernel = tuned(search=strategy, budget=40)
    args = arguments()
    first = tried(kernel.tune(*args))
    assert tried(kernel.tune(*args, force=True)) == first
    monkeypatch.setattr(nt.settings, "search_seed", 7)
    assert tried(kernel.tune(*args, force=True)) != first


def test_a_budget_in_seconds_stops_the_search_after_a_batch(fake_times):
    report = tuned(search="random", budget=nt.Budget(variants=None, seconds=1e-9)).tune(
        *arguments()
    )
    # One batch (8 variants, or as many as there are compile workers).
    assert report.tried == len(fake_times[0]) >= 8 and len(fake_times) == 1


def test_a_search_fits_its_last_batch_to_what_is_left_of_its_budget_in_seconds(
    fake_times, monkeypatch
):
    import types

    from numbatune.tuning import tuner

    clock = [0.0]  # each variant measured, but the best so far, takes 1.25 s of this clock
    measure = bench.measure

    def timed(runs, *rest, **options):
        clock[0] += 1.25 * (len(runs) - (len(fake_times) > 0))
        return measure(runs, *rest, **options)

    monkeypatch.setattr(bench, "measure", timed)
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(nt.settings, "compile_workers", 1)  # batches of 8 variants
    budget = nt.Budget(variants=None, seconds=35)
    report = tuned(search="random", budget=budget).tune(*arguments())
    # Three batches of 8 take 30 s; the 5 s left take a batch of 4 at that pace, and then
    # nothing is left.
    assert [len(batch) for batch in fake_times] == [8, 9, 9, 5]  # (the best so far, too)
    assert clock[0] == 35.0
    assert report.tried == len({v for batch in fake_times for v in batch}) == 28


def test_a_best_whose_run_fails_in_a_later_batch_gives_way_to_the_fastest_timed(
    fake_times, monkeypatch, caplog
):
    def measure(runs, *rest, **options):  # the second batch: every run fails, the best's too
        fake_times.append(list(runs))
        first = len(fake_times) == 1
        return {v: Timed(cost(v) * 1e-6, 0.0, 10) if first else RuntimeError("lost") for v in runs}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(nt.settings, "compile_workers", 1)  # batches of 8 variants
    caplog.set_level(logging.DEBUG, logger="numbatune")
    small = nt.product(A=range(4), B=range(4), C=[2], D=[64])
    report = tuned(small, search="random", budget=16).tune(*arguments())
    best_at_first = fastest(fake_times[0])
    assert len(fake_times) == 2 and best_at_first in fake_times[1]
    winner = report.results[report.best_index]
    assert winner.variant == fastest(v for v in fake_times[0] if v != best_at_first)
    assert report.fastest(1) == [winner]
    assert f"the best so far: {winner.variant.label} (" in caplog.text


def test_a_search_starts_from_the_winners_of_the_nearest_keys(fake_times):
    kernel = tuned(search="pattern", budget=30, key=lambda x, out: x.shape[0])
    winner = kernel.tune(*arguments(32)).winner
    fake_times.clear()
    kernel.tune(*arguments(64))
    assert winner in fake_times[0][:3]  # after the kernel as written


def test_a_searched_result_is_stored_compactly_and_served_to_searches_but_not_to_exhaustive(
    fake_times, numbatune_cache, monkeypatch
):
    kernel = tuned(search="pattern", budget=20)
    args = arguments()
    report = kernel.tune(*args)
    folder = function_folder(numbatune_cache / current_kind().partition, kernel.function_id)
    assert folder.exists()
    forget_shared_state(monkeypatch)
    fake_times.clear()
    again = tuned(search="random", budget=50).tune(*args)  # a new process, another search
    assert again.source == "disk" and again.best == report.best and not fake_times
    assert again.tried == report.tried and again.strategy == "pattern"
    forget_shared_state(monkeypatch)
    exhaustive = tuned(search="exhaustive").tune(*args)
    assert exhaustive.source == "benchmark" and exhaustive.tried == 1008


def test_a_stored_search_keeps_only_the_variants_it_tried(fake_times, numbatune_cache):
    from numbatune.cache import entry

    report = tuned(search="random", budget=12).tune(*arguments())
    stored = entry.encode(report, "checksum", "shift", "key")
    assert len(stored["results"]) == 12 and stored["space"] == 1008
    json.dumps(stored)  # plain JSON
    variants = {v.label: v for v in space()}
    decoded = entry.decode(stored, report.key, variants, "checksum")
    assert decoded.best == report.best and tried(decoded) == tried(report)


def cut_short_after(batches, fake_times, monkeypatch):
    """Measuring raises KeyboardInterrupt once ``batches`` batches are measured (as a user's
    Ctrl-C, or a job's time limit, would stop a tuning)."""
    measure = bench.measure

    def interrupted(runs, *rest, **options):
        if len(fake_times) == batches:
            raise KeyboardInterrupt
        return measure(runs, *rest, **options)

    monkeypatch.setattr(bench, "measure", interrupted)
    return measure


def stored_under(kernel, cache):
    from numbatune.cache.disk import Folder

    folder = function_folder(cache / current_kind().partition, kernel.function_id)
    return Folder(folder, kernel.function_id)


def test_a_large_exhaustive_run_is_measured_in_chunks_each_with_the_best_so_far(fake_times):
    report = tuned(search="exhaustive").tune(*arguments())
    assert report.tried == 1008 and report.best == {"A": 6, "B": 1, "C": 3, "D": 32}
    assert [len(batch) for batch in fake_times] == [64] + [65] * 14 + [49]
    for number, batch in enumerate(fake_times[1:], start=1):
        assert fastest(v for earlier in fake_times[:number] for v in earlier) in batch


def test_a_tuning_cut_short_goes_on_where_it_stopped_in_a_new_process(
    fake_times, numbatune_cache, monkeypatch
):
    from numbatune.cache import files

    measure = cut_short_after(3, fake_times, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        tuned(search="exhaustive").tune(*arguments())
    before = {v for batch in fake_times for v in batch}
    assert len(before) == 3 * 64 and files.stored_entries(numbatune_cache) == []  # no result
    forget_shared_state(monkeypatch)
    monkeypatch.setattr(bench, "measure", measure)
    fake_times.clear()
    kernel = tuned(search="exhaustive")
    report = kernel.tune(*arguments())
    assert report.tried == 1008 and report.best == {"A": 6, "B": 1, "C": 3, "D": 32}
    # Only the best of the earlier batches is measured again, with the first new one.
    again = [v for batch in fake_times for v in batch]
    assert set(again) & before == {min(before, key=cost)} <= set(fake_times[0])
    assert len(set(again)) == 1008 - len(before) + 1
    # The result replaced the unfinished tuning's record.
    assert len(stored_under(kernel, numbatune_cache).stored_keys()) == 1
    assert len(files.stored_entries(numbatune_cache)) == 1


def _failing_prioritized(priority, monkeypatch):
    """504 variants (``A + B < 14`` of 8 x 8 x 4 x 2) grouped by ``priority``, of which those of
    a priority above 0 all fail (a launch error)."""
    variants = nt.product(
        A=range(8),
        B=range(8),
        C=range(4),
        D=[16, 32],
        where=lambda A, B, **rest: A + B < 14,
        priority=priority,
    )
    timed = bench.measure

    def measure(runs, *rest, **options):
        times = timed(runs, *rest, **options)
        return {v: RuntimeError("too many resources") if v.priority else times[v] for v in runs}

    monkeypatch.setattr(bench, "measure", measure)
    return variants


def test_a_tuning_cut_short_after_its_top_priority_group_failed_goes_on_where_it_stopped(
    fake_times, numbatune_cache, monkeypatch
):
    # The top group (two variants) fails; the tuning falls back to every variant.
    variants = _failing_prioritized(
        lambda A, B, C, D: int(A < 2 and B == 0 and C == 0 and D == 16), monkeypatch
    )
    measure = cut_short_after(3, fake_times, monkeypatch)

    def kernel():
        return tuned(variants, search="random", budget=60, level="minimal")

    with pytest.raises(KeyboardInterrupt):
        kernel().tune(*arguments())
    failed, *fallen_back = fake_times
    assert {v.priority for v in failed} == {1}
    before = {v for batch in fallen_back for v in batch}
    forget_shared_state(monkeypatch)
    monkeypatch.setattr(bench, "measure", measure)
    fake_times.clear()
    report = kernel().tune(*arguments())
    # The fallback goes on where it stopped: of the variants it measured before, only the best
    # is measured again, and the failed top group is not tuned again.
    again = {v for batch in fake_times for v in batch}
    assert not again & set(failed)
    assert again & before == {fastest(v for v in before if not v.priority)}
    assert report.tried == 60 == len(again | before)


def test_a_fallback_search_spends_its_budget_past_the_top_priority_group_that_failed(
    fake_times, monkeypatch
):
    # At level minimal the top group (8 variants, every one failing) is tuned first, then with
    # the rest. Its variants are not the fallback's starting points: its budget of 8, spent on
    # them again, would find no working variant, and tuning would fail.
    variants = _failing_prioritized(lambda A, B, C, D: int(A == B == 0), monkeypatch)
    monkeypatch.setattr(nt.settings, "compile_workers", 1)  # batches of 8 variants
    report = tuned(variants, search="random", budget=8, level="minimal").tune(*arguments())
    failed, _fallback = fake_times  # one batch each
    assert set(failed) == {v for v in variants if v.priority}
    assert report.winner.priority == 0 and report.tried == 8


def test_a_fallback_search_does_not_start_from_the_variants_of_the_sets_that_failed(
    fake_times, monkeypatch
):
    # At level balanced the two highest groups (8 variants each, every one failing) are
    # tuned first, the search starting from the highest; then everything. The fallback does
    # not start from the failed sets' variants again: its budget of 8 would find no working one.
    variants = _failing_prioritized(
        lambda A, B, C, D: 2 if A == B == 0 else int(A == B == 1), monkeypatch
    )
    monkeypatch.setattr(nt.settings, "compile_workers", 1)  # batches of 8 variants
    report = tuned(variants, search="random", budget=8, level="balanced").tune(*arguments())
    failed, fallback = fake_times  # one batch each
    assert {v.priority for v in failed} == {2}
    assert not set(fallback) & {v for v in variants if v.priority}
    assert report.winner.priority == 0


def test_a_tuning_measured_in_one_batch_keeps_no_record_of_its_outcomes(
    fake_times, numbatune_cache, monkeypatch
):
    from numbatune.cache.journal import DiskJournal

    recorded = []
    monkeypatch.setattr(DiskJournal, "record", lambda self, outcomes: recorded.append(outcomes))
    small = nt.product(A=range(4), B=range(5), C=[2], D=[64, 128])  # 40 variants
    assert tuned(small).tune(*arguments()).tried == 40 and len(fake_times) == 1
    assert recorded == []
    tuned(search="exhaustive").tune(*arguments())  # 16 chunks: the last is not recorded
    assert len(recorded) == len(fake_times) - 2


def test_a_forced_retune_does_not_go_on_with_an_unfinished_one(
    fake_times, numbatune_cache, monkeypatch
):
    measure = cut_short_after(2, fake_times, monkeypatch)
    kernel = tuned(search="exhaustive")
    with pytest.raises(KeyboardInterrupt):
        kernel.tune(*arguments())
    monkeypatch.setattr(bench, "measure", measure)
    fake_times.clear()
    assert kernel.tune(*arguments(), force=True).tried == 1008
    assert len({v for batch in fake_times for v in batch}) == 1008


def test_a_damaged_record_of_an_unfinished_tuning_is_discarded_with_a_warning(
    fake_times, numbatune_cache, monkeypatch, caplog
):
    measure = cut_short_after(2, fake_times, monkeypatch)
    kernel = tuned(search="exhaustive")
    with pytest.raises(KeyboardInterrupt):
        kernel.tune(*arguments())
    folder = stored_under(kernel, numbatune_cache)
    (journal,) = folder.stored_keys()
    folder.set(journal, '{"format": 3, "results": [')  # cut off mid-write
    forget_shared_state(monkeypatch)
    monkeypatch.setattr(bench, "measure", measure)
    fake_times.clear()
    with caplog.at_level(logging.WARNING, logger="numbatune"):
        assert tuned(search="exhaustive").tune(*arguments()).tried == 1008
    assert len({v for batch in fake_times for v in batch}) == 1008
    assert "discarded the damaged record of an unfinished tuning" in caplog.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"search": "greedy"}, "search must be one of auto, exhaustive, random, pattern, model"),
        ({"budget": 0}, "variants must be >= 1"),
        ({"budget": "soon"}, "a budget is a number of variants"),
        ({"budget": 2.5}, "budget must be a numbatune.Budget"),
    ],
)
def test_a_bad_search_or_budget_is_refused_naming_it(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        tuned(**options)


@pytest.mark.parametrize("seconds", [True, 0, -1.0, float("inf"), "60"])
def test_a_budget_of_seconds_that_are_not_a_positive_number_is_refused(seconds):
    with pytest.raises(ValueError, match="seconds must be a number > 0"):
        nt.Budget(seconds=seconds)


def test_a_model_search_without_scikit_learn_is_refused_saying_what_to_install(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "sklearn" else find_spec(name, *rest),
    )
    with pytest.raises(
        ImportError, match=r"autotune\(shift\): search='model' .* 'numbatune\[model\]'"
    ):
        tuned(search="model")


def test_the_settings_take_a_strategy_a_budget_and_a_seed(monkeypatch):
    monkeypatch.setenv("NUMBATUNE_SEARCH", "random")
    monkeypatch.setenv("NUMBATUNE_SEARCH_BUDGET", "50,30s")
    monkeypatch.setenv("NUMBATUNE_SEARCH_SEED", "3")
    saved = (nt.settings.search, nt.settings.search_budget, nt.settings.search_seed)
    try:
        load_environment()
        assert nt.settings.search == "random" and nt.settings.search_seed == 3
        assert nt.settings.search_budget == nt.Budget(variants=50, seconds=30.0)
    finally:
        nt.configure(search=saved[0], search_budget=saved[1], search_seed=saved[2])
