"""Search strategies over spaces too large to measure whole, with fake, deterministic times."""

import json
import random

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune.cache.tunecache import function_folder
from numbatune.config import load_environment
from numbatune.devices import current_kind
from numbatune.tuning import bench, search
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
    """Tuning measures with ``cost`` instead of a stopwatch; each measured batch is kept."""
    batches = []

    def measure(runs, stream=0, inputs=(), restore=lambda: None):
        batches.append(list(runs))
        return {variant: Timed(cost(variant) * 1e-6, 0.0, 10) for variant in runs}

    monkeypatch.setattr(bench, "measure", measure)
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


def tried(report):
    return [r.variant for r in report.results if r.tried]


# -- the strategies, alone ----------------------------------------------------------------------


def test_a_grid_orders_numbers_and_steps_over_values_a_filter_removed():
    variants = nt.product(X=[4, 1, 2, 8], Y=["a", "b"], where=lambda X, Y: (X, Y) != (2, "a"))
    grid = search.Grid(variants)
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
    grid = search.Grid(variants)
    start = next(v for v in variants if v.params == dict(BM=64, TM=2, SPREAD=False, THREADS=32))
    near = {(v.params["BM"], v.params["TM"], v.params["SPREAD"]) for v in grid.neighbours(start)}
    assert near == {(32, 2, False), (128, 2, False), (64, 4, False), (64, 2, True)}


def test_random_search_draws_the_same_variants_for_the_same_seed_and_key():
    variants = space()

    def drawn(seed, key):
        proposer = search.proposer(
            nt.Strategy.RANDOM, variants, [], search.randomness_for(seed, key), batch=16
        )
        return proposer.propose({}, None) + proposer.propose({}, None)

    assert drawn(0, "(1024,)") == drawn(0, "(1024,)")
    assert drawn(0, "(1024,)") != drawn(1, "(1024,)")
    assert drawn(0, "(1024,)") != drawn(0, "(2048,)")
    assert len(set(drawn(0, "(1024,)"))) == 32


@pytest.mark.parametrize("strategy", [nt.Strategy.RANDOM, nt.Strategy.PATTERN])
def test_a_search_proposes_every_variant_once_and_starts_where_it_is_told(strategy):
    variants = space()
    start = nt.Variant({"A": 7, "B": 0, "C": 1, "D": 16})
    proposer = search.proposer(strategy, variants, [start], random.Random(0), batch=8)
    proposed, times, best = [], {}, None
    while batch := proposer.propose(times, best):
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
    while len(times) < 80 and (batch := proposer.propose(times, best)):
        times.update({v: cost(v) for v in batch})
        best = min(times, key=times.get)
    assert best == nt.Variant({"A": 6, "B": 1, "C": 3, "D": 32})


# -- searches in a tuning -----------------------------------------------------------------------


def test_a_large_space_is_searched_within_the_budget_and_finds_the_best(fake_times):
    variants = space()
    report = tuned(search="pattern", budget=80).tune(*arguments())
    assert report.strategy == "pattern" and report.space == len(variants) == 1008
    assert report.tried <= 80 and report.best == {"A": 6, "B": 1, "C": 3, "D": 32}
    assert report.tuning_s == report.compile_s + report.trial_s + report.benchmark_s
    first = fake_times[0]
    assert first[0] == nt.Variant({"A": 3, "B": 5, "C": 2, "D": 64})  # the kernel as written
    # Each later batch is measured with the best so far, so decisions compare one measurement.
    for number, batch in enumerate(fake_times[1:], start=1):
        best_so_far = min((v for earlier in fake_times[:number] for v in earlier), key=cost)
        assert best_so_far in batch


def test_auto_measures_small_spaces_whole_and_searches_large_ones_within_its_budget(fake_times):
    small = nt.product(A=range(4), B=range(5), C=[2], D=[64, 128])  # 40 variants
    report = tuned(small).tune(*arguments())
    assert report.strategy == "exhaustive" and report.tried == 40 and len(fake_times) == 1
    report = tuned().tune(*arguments())
    assert report.strategy == "pattern" and report.tried == 100  # the default budget


def test_the_same_seed_tries_the_same_variants_and_another_seed_others(fake_times, monkeypatch):
    kernel = tuned(search="random", budget=20)
    args = arguments()
    first = tried(kernel.tune(*args))
    assert tried(kernel.tune(*args, force=True)) == first
    monkeypatch.setattr(nt.settings, "search_seed", 7)
    assert tried(kernel.tune(*args, force=True)) != first


def test_a_budget_in_seconds_stops_the_search_after_a_batch(fake_times):
    report = tuned(search="random", budget=nt.Budget(variants=None, seconds=1e-9)).tune(
        *arguments()
    )
    assert report.tried == len(fake_times[0]) == 8 and len(fake_times) == 1


def test_a_search_starts_from_the_winners_of_the_nearest_keys(fake_times):
    kernel = tuned(search="pattern", budget=30, key=lambda x, out: x.shape[0])
    winner = kernel.tune(*arguments(32)).best_variant
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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"search": "greedy"}, "search must be one of auto, exhaustive, random, pattern"),
        ({"budget": 0}, "variants must be >= 1"),
        ({"budget": "soon"}, "a budget is a number of variants"),
        ({"budget": 2.5}, "budget must be a numbatune.Budget"),
    ],
)
def test_a_bad_search_or_budget_is_refused_naming_it(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        tuned(**options)


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
