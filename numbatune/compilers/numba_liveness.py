"""numba's live-variable analysis, computed on bit sets, for compile workers.

numba computes the variables live at each block's entry (``compute_live_map``) nine times per
kernel, to a fixed point over Python sets, visiting blocks in program order while liveness
flows backwards: a kernel whose loops were written out (hundreds of blocks, thousands of
variables) takes a pass per block (0.64 of 2.9 s of sgemm's largest build on the development
machine). :func:`compute_live_map` computes the same least fixed point with one bit per variable
of a Python integer, in reverse program order: a few passes. The tests compare the two.
:func:`install` puts it in numba's place; compile workers do, the user's process does not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

#: The parameters of numba's ``compute_live_map`` that this one replaces.
_PARAMETERS = ("cfg", "blocks", "var_use_map", "var_def_map")


def compute_live_map(
    cfg: Any,
    blocks: Mapping[Hashable, Any],
    var_use_map: Mapping[Hashable, set[str]],
    var_def_map: Mapping[Hashable, set[str]],
) -> dict[Hashable, set[str]]:
    """The variables live at the entry of each block, as numba's function of the same name
    computes them (from the control-flow graph and each block's used and defined variables)."""
    names: list[str] = []
    positions: dict[str, int] = {}

    def bits(variables: Iterable[str]) -> int:
        value = 0
        for name in variables:
            position = positions.get(name)
            if position is None:
                position = positions[name] = len(names)
                names.append(name)
            value |= 1 << position
        return value

    uses = {block: bits(var_use_map[block]) for block in var_use_map}
    defines = {block: bits(var_def_map[block]) for block in var_def_map}
    # What may be defined on some path to a block's end, flowing forwards.
    reach = _fixed_point(
        sorted(var_def_map),
        {block: [after for after, _ in cfg.successors(block)] for block in var_def_map},
        {block: defines[block] | uses[block] for block in var_def_map},
        lambda _before, value: value,
    )
    # What is live at a block's entry, flowing backwards to its predecessors: what they may
    # have defined and do not define themselves.
    not_defined = {block: ~value for block, value in defines.items()}
    live = _fixed_point(
        sorted(blocks, reverse=True),
        {block: [before for before, _ in cfg.predecessors(block)] for block in blocks},
        {block: uses[block] for block in blocks},
        lambda before, value: value & reach.get(before, 0) & not_defined[before],
    )
    return {block: _variables(value, names) for block, value in live.items()}


def _fixed_point(
    order: list[Hashable],
    edges: Mapping[Hashable, list[Hashable]],
    start: dict[Hashable, int],
    carried: Callable[[Hashable, int], int],
) -> dict[Hashable, int]:
    """The least values, from ``start`` up, such that each block's value holds what
    ``carried(target, value)`` carries from each block to the targets of its ``edges``; the
    blocks visited in ``order`` until a pass changes nothing."""
    values = dict(start)
    changed = True
    while changed:
        changed = False
        for block in order:
            value = values[block]
            for target in edges[block]:
                old = values.get(target, 0)
                new = old | carried(target, value)
                if new != old:
                    values[target] = new
                    changed = True
    return values


def _variables(value: int, names: list[str]) -> set[str]:
    """The names of the bits set in ``value``."""
    found = set()
    while value:
        lowest = value & -value
        found.add(names[lowest.bit_length() - 1])
        value ^= lowest
    return found


def install() -> bool:
    """Use :func:`compute_live_map` in numba-cuda's analysis in this process; False (numba
    left as it is) where numba-cuda has no such function, or one that takes other parameters."""
    try:
        from numba.cuda.core import analysis, ir_utils
    except ImportError:
        return False
    current = getattr(analysis, "compute_live_map", None)
    if current is compute_live_map:
        return True
    if current is None or not hasattr(ir_utils, "compute_live_map"):
        return False
    if tuple(inspect.signature(current).parameters) != _PARAMETERS:
        return False
    analysis.compute_live_map = ir_utils.compute_live_map = compute_live_map
    return True
