"""The generated code of a fast path, per argument signature (as Triton generates its
launchers): ``call(args, stream)`` checks the arguments' classes and reads them in C, handing
calls it cannot take to ``_by_classes`` (other argument classes) or ``_next`` (another
signature of the same classes), and what it read to the C ``Launcher``, which launches the
key's winner (numbatune/_launcher.c); ``launch_winner(args, winner, stream)`` launches a
winner the general path found, False where it cannot. docs/architecture.md draws its steps.
"""

from __future__ import annotations

from numbatune.launch.layout import ArgumentPlan


def struct_format(plan: ArgumentPlan, layout: list[tuple[int, int]]) -> str:
    """The ``struct`` format that packs the plan's fields at the driver's offsets (the fields
    given as one bytes value are 8-byte parameters, which the driver lays out with no gap)."""
    fmt, position, index = "<", 0, 0
    while index < len(plan.fields):
        count = plan.packed.get(index, 0)
        offset = layout[index][0]
        fmt += f"{offset - position}x" * (offset > position)
        fmt += f"{8 * count}s" if count else plan.fields[index]
        index += count or 1
        position = sum(layout[index - 1])
    return fmt


def _front(plan: ArgumentPlan, arity: int, reject: str, reject_classes: str) -> list[str]:
    """Code that checks the arguments' classes (else ``reject_classes``), unpacks them into
    ``a0, a1, ...`` and runs the plan's checks and reads (``reject`` for another signature)."""
    names = "".join(f"a{i}, " for i in range(arity))
    lines = ["    if not _same_classes(args, _classes):", f"        {reject_classes}"]
    lines += [f"    {names}= args"] if arity else []
    checks: list[str] = []
    for kind, code in [*plan.steps, ("read", "")]:
        if kind == "check":
            checks.append(code)
            continue
        if checks:
            lines += [f"    if not ({' and '.join(checks)}):", f"        {reject}"]
            checks = []
        if code:
            lines.append(f"    {code}")
    return lines


def source(plan: ArgumentPlan, arity: int, custom_key: bool) -> str:
    """The source of ``call`` and ``launch_winner`` for one signature, which hand what they
    read to the Launcher (``_hit``, ``_launch_winner``), and of the Python reads it asks its
    fallbacks for: ``buffers(args)``, the arrays' allocations, and ``kept(args, unordered)``,
    the arrays of the libraries (bit ``i`` of ``unordered``: ``plan.read_kinds[i]``'s) launched
    apart from their current stream."""
    names = "".join(f"a{i}, " for i in range(arity))
    unpack = [f"    {names}= args"] if arity else []
    passed = ", ".join([*plan.reads, *plan.values])
    key = "_key(args)" if custom_key else plan.key()
    kept = [
        f"*(({''.join(f'{a}, ' for a in arrays)}) if unordered & {1 << i} else ())"
        for i, kind in enumerate(plan.read_kinds)
        if (arrays := plan.library_arrays.get(kind))
    ]
    return "\n".join([
        "def call(args, stream):",
        *_front(plan, arity, "return _next(args, stream)", "return _by_classes(args, stream)"),
        f"    return _hit(args, stream, {key}, {passed})",
        "def launch_winner(args, winner, stream):",
        *_front(plan, arity, "return False", "return False"),
        f"    return _launch_winner(args, stream, winner, {passed})",
        "def buffers(args):",
        *unpack,
        f"    return ({''.join(f'{buffer}, ' for buffer in plan.buffers)})",
        "def kept(args, unordered):",
        *unpack,
        f"    return ({''.join(f'{k}, ' for k in kept)})",
    ])  # fmt: skip
