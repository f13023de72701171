"""What a fast path's C ``Launcher`` hands back to Python, with no GPU: the general path for a
winner ``valid`` refuses or a launch from another context, numba's launch for a value the
packing refuses, the launch and valid functions' errors in words, and the stream it launches on
(torch's CPU tensors read through DLPack, the driver's launch replaced by a capture)."""

import types

import numba
import numpy as np
import pytest

from numbatune import _native, native
from numbatune.cache.tunecache import WinnerTable
from numbatune.compilers import numba_parameters
from numbatune.errors import LaunchFunctionError
from numbatune.keys import default_key
from numbatune.launch import fastpath
from numbatune.launch.layout import ArgumentPlan
from tests.test_dlpack import _natural_layout, _numba_type, _without_a_driver

torch = pytest.importorskip("torch")

WINNER = types.SimpleNamespace(index=0, params={"BLOCK": 32})


def _launcher_path(example, monkeypatch, taken, launch=lambda *args, BLOCK: (1, BLOCK), **hooks):
    """A fast path for ``example`` whose key's winner is :data:`WINNER`, its hooks noting in
    ``taken`` what reached the general path and numba's launch; the launches (function,
    config, stream) it makes, in the list returned."""
    plan = ArgumentPlan(numba_parameters.parameters)
    for index, value in enumerate(example):
        argtype = _numba_type(value) if isinstance(value, torch.Tensor) else numba.typeof(value)
        assert plan.add(f"a{index}", argtype, value)
    plan.close()
    _without_a_driver(monkeypatch)
    general = lambda args, stream: taken.append(("general", stream))  # noqa: E731
    through_numba = lambda args, winner, config, stream: taken.append(("numba", config, stream))  # noqa: E731
    made = fastpath.Hooks("k", launch, None, general, None, through_numba, **hooks)
    winners = WinnerTable()
    winners[default_key(example)] = WINNER
    path = fastpath._generate(
        plan, _natural_layout(plan.fields), example, winners, made, None, False
    )
    path._functions[0] = 11
    launched = []
    path.launcher.launch = lambda *call: launched.append(call[:3]) or 0
    return path, launched


def test_a_winner_valid_refuses_goes_to_the_general_path_and_its_error_is_worded(monkeypatch):
    example, taken = (torch.zeros(4), 2.5), []
    runs = [False]

    def valid(x, a, *, BLOCK):
        if runs[0] is None:
            raise ZeroDivisionError("no")
        return runs[0]

    path, launched = _launcher_path(
        example, monkeypatch, taken, valid=valid, valid_params=({"BLOCK": 32},)
    )
    path.call(example, 7)
    assert taken == [("general", 7)] and not launched
    runs[0] = True
    path.call(example, 7)
    assert launched == [(11, (1, 32), 7)]
    runs[0] = None
    with pytest.raises(
        LaunchFunctionError, match=r"k: the valid function raised ZeroDivisionError"
    ):
        path.call(example, 7)


def test_a_launch_function_that_raises_is_named_in_the_error(monkeypatch):
    def launch(x, a, *, BLOCK):
        raise KeyError("BLOCK_Y")

    path, _ = _launcher_path((torch.zeros(4), 2.5), monkeypatch, [], launch=launch)
    with pytest.raises(LaunchFunctionError, match=r"k: the launch function raised KeyError"):
        path.call((torch.zeros(4), 2.5), None)


def test_a_scalar_the_packing_refuses_is_launched_through_numba(monkeypatch):
    """An int over 2**63, which numba types as uint64 (the signature's is int64)."""
    example, taken = (torch.zeros(4), np.float32(1.5), 3), []
    path, launched = _launcher_path(example, monkeypatch, taken)
    assert path.call(example, 5) is None and launched == [(11, (1, 32), 5)]
    assert path.launch_winner((example[0], np.float32(1.5), 2**64), WINNER, 5)
    assert taken == [("numba", (1, 32), 5)] and len(launched) == 1


def test_a_launch_from_another_context_goes_the_general_way_or_through_numba(monkeypatch):
    example, taken = (torch.zeros(4), 2.5), []
    path, _ = _launcher_path(example, monkeypatch, taken)
    path.launcher.launch = lambda *call: native.WRONG_CONTEXT
    path.call(example, 3)
    assert path.launch_winner(example, WINNER, 4)
    assert taken == [("general", 3), ("numba", (1, 32), 4)]


def test_a_winner_with_no_function_for_the_signature_is_not_launched(monkeypatch):
    example, taken = (torch.zeros(4), 2.5), []
    path, launched = _launcher_path(example, monkeypatch, taken)
    other = types.SimpleNamespace(index=1, params={"BLOCK": 64})
    assert not path.launch_winner(example, other, 3)
    assert not launched and not taken


@pytest.mark.parametrize(
    "given, handle",
    [(None, 0), (9, 9), (types.SimpleNamespace(_numbatune_handle=12), 12)],
    ids=["none: torch's current stream", "a handle", "a stream object"],
)
def test_the_stream_launched_on_is_the_one_given_or_the_librarys_current_one(
    given, handle, monkeypatch
):
    """(torch's current stream of CPU tensors is the legacy default stream, 0)"""
    example = (torch.zeros(4), 2.5)
    path, launched = _launcher_path(example, monkeypatch, [])
    path.call(example, given)
    assert launched == [(11, (1, 32), handle)]


def test_a_launcher_is_made_only_with_the_stream_order():
    with pytest.raises(TypeError, match="an Order"):
        _native.Launcher(
            winners={}, functions={}, config=None, configs=None, readers=(), scalars=(),
            pack=None, launch=None, offsets=b"", context=0, cooperative=False, order=object(),
            fallbacks=None, name="k", sync=True, reads=0, streamed=0, top=-1, remember=True,
            valid=False,
        )  # fmt: skip
