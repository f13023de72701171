"""numbatune's live-variable analysis (compilers.numba_liveness) computes numba's, faster."""

import numba
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.cuda.core import analysis
from numba.cuda.core.controlflow import CFGraph

from numbatune import processes
from numbatune.compile import compiler
from numbatune.compilers import NUMBA_CUDA
from numbatune.compilers import numba_liveness as liveness
from tests.kernels import load_example

NAMES = [f"v{i}" for i in range(12)]


@st.composite
def programs(draw):
    """A control-flow graph (loops, branches, unreachable blocks) and each block's used and
    defined variables."""
    count = draw(st.integers(1, 25))
    blocks = [10 * k for k in range(count)]  # labels as numba's: offsets in the bytecode
    graph = CFGraph()
    for block in blocks:
        graph.add_node(block)
    edges = st.tuples(st.sampled_from(blocks), st.sampled_from(blocks))
    for source, target in draw(st.lists(edges, max_size=3 * count)):
        graph.add_edge(source, target)
    graph.set_entry_point(blocks[0])
    graph.process()
    names = st.sets(st.sampled_from(NAMES), max_size=6)
    uses = {block: draw(names) for block in blocks}
    defines = {block: draw(names) - uses[block] for block in blocks}
    return graph, dict.fromkeys(blocks), uses, defines


@settings(max_examples=300, deadline=None)
@given(programs())
def test_the_live_map_is_numbas_on_any_control_flow_graph(program):
    assert analysis.compute_live_map.__module__ == analysis.__name__  # numba's, not replaced
    assert liveness.compute_live_map(*program) == analysis.compute_live_map(*program)


def test_numba_is_left_as_it_is_where_its_function_takes_other_parameters(monkeypatch):
    from numba.cuda.core import ir_utils

    def other(cfg, blocks, usemap, defmap, extra):
        return {}

    monkeypatch.setattr(analysis, "compute_live_map", other)
    monkeypatch.setattr(ir_utils, "compute_live_map", other)
    assert liveness.install() is False
    assert analysis.compute_live_map is other and ir_utils.compute_live_map is other


needs_workers = pytest.mark.skipif(not processes.available(), reason="worker processes need POSIX")


def _environment():
    return processes.environment(simulator=False, CUDA_VISIBLE_DEVICES="")


@needs_workers
@pytest.mark.parametrize(
    ("example", "params"),
    [
        ("sgemm", dict(BM=128, BN=128, BK=16, TM=8, TN=8)),  # loops written out
        ("softmax", dict(WARPS=4, ROWS=1, ITEMS=8)),  # device functions
    ],
)
def test_a_compile_in_a_worker_gets_numbas_live_maps(example, params):
    """Every live map numba asks for while it compiles an example's variant in a worker equals
    numba's own."""
    tuned, args = load_example(example).example(small=True)
    (variant,) = [v for v in tuned.variants if params.items() <= v.params.items()][:1]
    argtypes = tuple(numba.typeof(a) for a in args)
    task = compiler.build_task(tuned._template, [[variant]], argtypes, (9, 0))
    pool = processes.WorkerPool(1, _environment())
    try:
        (outcome,) = pool.run([processes.Task("tests.workers", "live_maps_compared", task.args)],
                              300)  # fmt: skip
    finally:
        pool.close()
    asked, most_blocks, differing = outcome.value
    assert asked >= 9 and differing == 0
    if example == "sgemm":
        assert most_blocks > 200


@needs_workers
def test_compile_workers_use_numbatunes_live_maps():
    pool = compiler.worker_pool(1, NUMBA_CUDA)
    try:
        (outcome,) = pool.run([processes.Task("tests.workers", "live_map_function", ())], 300)
    finally:
        pool.close()
    assert outcome.value == (liveness.__name__, liveness.__name__)
