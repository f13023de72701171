"""Tuned kernels inside CUDA graphs (torch.cuda.graph, CuPy's capture, cuda.core's graph
builder) and torch.compile."""

import numpy as np
import pytest
from numba import cuda

import numbatune as nt
from numbatune import dispatch

N = 256


@cuda.jit
def add_twice(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        out[i] += 2 * a[i]


def add_twice_launch(a, out, *, BLOCK):
    return nt.cdiv(a.shape[0], BLOCK), BLOCK


def _tuned(name="add_twice"):
    return nt.autotune(variants=nt.product(BLOCK=[64, 128]), launch=add_twice_launch, name=name)(
        add_twice
    )


def _arrays(value=1.0):
    return (
        cuda.to_device(np.full(N, value, np.float32)),
        cuda.to_device(np.zeros(N, np.float32)),
    )


def test_a_miss_inside_a_capture_raises_naming_the_key_and_how_to_tune_ahead(monkeypatch):
    """Tuning synchronises and allocates, which a capture refuses (and is invalidated by):
    a call that would tune inside one raises before anything reaches the device."""
    tuned = _tuned()
    a, out = _arrays()
    monkeypatch.setattr(dispatch, "captured", lambda stream, args: True)
    with pytest.raises(nt.CaptureError, match=r"add_twice: key .*256.* add_twice\.warmup"):
        tuned(a, out)
    with pytest.raises(nt.CaptureError, match="captured into a CUDA graph"):
        tuned.tune(a, out)
    assert tuned.stats["benchmarks"] == 0
    assert not out.copy_to_host().any()


def test_warmup_tunes_ahead_so_that_a_call_inside_a_capture_only_launches(monkeypatch):
    tuned = _tuned()
    a, out = _arrays()
    report = tuned.warmup(a, out)
    assert report.best in ({"BLOCK": 64}, {"BLOCK": 128})
    assert not out.copy_to_host().any()  # warming up launches nothing on the arguments
    monkeypatch.setattr(dispatch, "captured", lambda stream, args: True)
    tuned(a, out)
    assert (out.copy_to_host() == 2).all() and tuned.stats["benchmarks"] == 1


def test_a_tuned_kernel_in_a_function_torch_compile_compiles_runs_as_written():
    """torch.compile traced the frames a tuned kernel's call runs (its tuning, whose NumPy
    copies it turned into fake tensor calls): every variant failed, or the trace did."""
    torch = pytest.importorskip("torch")
    tuned = _tuned()
    a, out = _arrays()

    def double_and_add(x):
        tuned(a, out)
        return x * 2

    compiled = torch.compile(double_and_add, backend="eager")
    for calls in (1, 2):
        assert compiled(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
        assert (out.copy_to_host() == 2 * calls).all()
    assert tuned.stats["benchmarks"] == 1


def test_a_custom_op_is_held_by_a_full_graph_with_the_arguments_it_writes():
    torch = pytest.importorskip("torch")
    from numbatune.torch import custom_op

    op = custom_op(_tuned(), mutates_args=["out"], name="add_twice_traced")
    assert str(op._opoverload._schema) == (
        "numbatune::add_twice_traced(Tensor a, Tensor(a!) out) -> ()"
    )
    graphs = []

    def keep_graph(graph, inputs):  # traces only: the kernel is not run on CPU tensors
        graphs.append(graph)
        return lambda *args: None

    def f(a, out):
        op(a, out)

    torch.compile(f, fullgraph=True, backend=keep_graph)(torch.ones(4), torch.zeros(4))
    (graph,) = graphs
    assert any("numbatune.add_twice_traced" in str(node.target) for node in graph.graph.nodes)


def test_a_custom_op_refuses_a_written_argument_the_kernel_does_not_take():
    pytest.importorskip("torch")
    from numbatune.torch import custom_op

    with pytest.raises(ValueError, match=r"mutates_args names \['y'\], which add_twice"):
        custom_op(_tuned(), mutates_args=["y"], name="add_twice_refused")


def test_a_hit_given_a_graph_builder_launches_on_its_capturing_stream_and_waits_for_none(
    monkeypatch,
):
    """cuda.core's GraphBuilder is a stream object (``__cuda_stream__``: its capturing
    stream's handle). A fast path launches there, also once several streams are ordered, and
    queues no wait: an event recorded outside a capture cannot be waited for inside it."""
    import types

    pytest.importorskip("torch")
    import torch

    from tests.test_dlpack import _fast_path

    builder_class = type(
        "GraphBuilder",
        (),
        {"__module__": "cuda.core.graph._graph_builder", "__cuda_stream__": lambda _: (0, 4321)},
    )
    example = (torch.ones(8), torch.zeros(8), 2.5)
    path, _ = _fast_path(example, monkeypatch)
    streams = []
    path.launcher.launch = lambda *call: streams.append(call[2]) or 0
    events = path.call.__globals__["_order"].monitor.events
    winner = types.SimpleNamespace(index=0, params={})
    for stream in (7, 8):  # two streams: every launch is ordered from now on
        assert path.launch_winner(example, winner, stream)
    events.captured.add(4321)
    waits = list(events.waits)
    assert path.launch_winner(example, winner, builder_class())
    assert streams == [7, 8, 4321] and events.waits == waits


# -- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_a_hit_is_captured_by_torch_cuda_graph_and_replays_on_new_inputs():
    """Before: cuStreamWaitEvent failed [901] in the capture, torch's capture was invalidated,
    and torch's random numbers failed afterwards in the process."""
    torch = pytest.importorskip("torch")
    tuned = _tuned()
    a = torch.ones(N, device="cuda")
    out = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()  # warmed on a side stream, as torch's documentation says
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            tuned(a, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tuned(a, out)
    out.zero_()
    a.fill_(3.0)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert (out == 12).all()
    assert torch.rand(4, device="cuda").shape == (4,)  # torch's RNG state is whole


@pytest.mark.gpu
def test_a_miss_inside_torch_cuda_graph_raises_and_leaves_the_capture_valid():
    torch = pytest.importorskip("torch")
    tuned = _tuned()
    a = torch.ones(N, device="cuda")
    out = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with pytest.raises(nt.CaptureError, match="warmup"):
            tuned(a, out)
        out.add_(1)
    graph.replay()
    torch.cuda.synchronize()
    assert (out == 1).all() and tuned.stats["benchmarks"] == 0
    tuned.warmup(a, out)
    with torch.cuda.graph(graph := torch.cuda.CUDAGraph()):
        tuned(a, out)
    graph.replay()
    torch.cuda.synchronize()
    assert (out == 3).all()


@pytest.mark.gpu
@pytest.mark.parametrize("non_blocking", [True, False])
def test_a_hit_is_captured_by_cupys_stream_capture_after_another_streams_launches(non_blocking):
    """Before, on a blocking stream after launches on the default stream: cuEventRecord failed
    [906] (an event recorded on the legacy stream while a blocking stream is captured)."""
    cp = pytest.importorskip("cupy")
    tuned = _tuned()
    a = cp.ones(N, dtype=cp.float32)
    out = cp.zeros(N, dtype=cp.float32)
    tuned(a, out)  # on CuPy's current stream, the legacy default one
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=non_blocking)
    with stream:
        stream.begin_capture()
        tuned(a, out)
        graph = stream.end_capture()
    out[...] = 0
    a[...] = 3
    cp.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    assert bool((out == 6).all())


@pytest.mark.gpu
def test_a_hit_is_captured_by_cuda_cores_graph_builder_after_a_cuda_core_stream():
    """Before: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED from the host waiting for the first
    stream's context inside the capture. The copies go to the legacy default stream, which
    does not order cuda.core's (non-blocking) streams, and a small copy from pageable memory
    may land after its call returned: the device finishes them before the first launch and
    before the replay, which would otherwise race them."""
    core = pytest.importorskip("cuda.core")
    device = core.Device()
    device.set_current()
    stream = device.create_stream()
    tuned = _tuned()
    a, out = _arrays()
    cuda.synchronize()
    tuned(a, out, stream=stream)
    stream.sync()
    builder = device.create_graph_builder()
    builder.begin_building()
    tuned(a, out, stream=builder)
    graph = builder.end_building().complete()
    out.copy_to_device(np.zeros(N, np.float32))
    a.copy_to_device(np.full(N, 3, np.float32))  # the inputs change in place
    cuda.synchronize()
    graph.launch(stream)
    graph.launch(stream)  # each replay adds: the launch is in the graph, not run at capture
    stream.sync()
    assert (out.copy_to_host() == 12).all()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_tuned_kernel_tunes_and_runs_inside_a_compiled_function(mode):
    """Before: the first call's tuning failed every variant (KeyError: <ufunc 'multiply'>)."""
    torch = pytest.importorskip("torch")
    tuned = _tuned()

    def f(a, out):
        tuned(a, out)
        return out * 2

    compiled = torch.compile(f, mode=mode)
    a = torch.ones(N, device="cuda")
    out = torch.zeros(N, device="cuda")
    for calls in (1, 2, 3):
        result = compiled(a, out)
        torch.cuda.synchronize()
        assert (out == 2 * calls).all() and (result == 4 * calls).all()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_custom_op_compiles_in_a_full_graph_and_passes_opcheck(mode):
    """Before: Dynamo does not know how to trace method `__call__` of class `TunedKernel`.
    Under reduce-overhead the operator is captured into torch's CUDA graph (its output is
    made inside the function: torch captures no graph that writes an input)."""
    torch = pytest.importorskip("torch")
    from torch._dynamo.utils import counters

    from numbatune.torch import custom_op

    tuned = _tuned()
    op = custom_op(tuned, mutates_args=["out"], name=f"add_twice_{mode.replace('-', '_')}")
    a = torch.ones(N, device="cuda")
    tuned.warmup(a, torch.zeros(N, device="cuda"))
    torch.library.opcheck(op, (a, torch.zeros(N, device="cuda")))

    def f(a):
        out = torch.zeros_like(a)
        op(a, out)
        return out + 1

    counters.clear()
    compiled = torch.compile(f, fullgraph=True, mode=mode)
    for value in (1.0, 2.0, 3.0):
        a.fill_(value)
        result = compiled(a)
        torch.cuda.synchronize()
        assert (result == 2 * value + 1).all()
    assert not counters["inductor"]["cudagraph_skips"]
