"""The generated code of a fast path, per argument signature (as Triton generates its
launchers): ``call(args, stream)`` finds the key's winner and launches it, handing calls it
cannot take to ``_by_classes`` (other argument classes), ``_next`` (another signature of the
same classes) or ``_general`` (a new key); ``launch_winner(args, winner, stream)`` launches a
winner the general path found, False where it cannot. docs/architecture.md draws its steps.
"""

from __future__ import annotations

from typing import Any

from numbatune.arraykinds import kind_of
from numbatune.launch.layout import ArgumentPlan
from numbatune.rawstreams import HANDLE_MEMO


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


def stream_lines(args: tuple[Any, ...], sync: bool, plan: ArgumentPlan) -> list[str]:
    """Code that turns ``stream`` into a raw handle (None: the first top-level array's library's
    current stream), with each library ``L``'s current stream in ``producer_L`` (read with its
    arrays, in C) and whether the driver leaves the two unordered in ``unordered_L`` (the
    order's ``apart``, which makes the stream wait where ``sync``)."""
    handle = (
        "stream if type(stream) is int else "
        f"getattr(stream, '{HANDLE_MEMO}', None) or _stream_handle(stream)"
    )
    producers = plan.current_streams
    lines = [f"    producer_{kind.name} = {current}" for kind, current in producers.items()]
    top = next((kind for kind in map(kind_of, map(type, args)) if kind in producers), None)
    default = "0" if top is None else f"producer_{top.name}"
    lines.append(f"    stream = {default} if stream is None else {handle}")
    lines += [
        f"    unordered_{kind.name} = stream != producer_{kind.name} and "
        f"_order.apart(stream, producer_{kind.name}, given, {sync})"
        for kind in producers
    ]
    return lines


def _ordering(plan: ArgumentPlan) -> tuple[list[str], list[str]]:
    """Code before and after the launch: with one stream so far, a comparison of two handles;
    else the order's ``before`` and ``after`` (:mod:`numbatune.streams.order`), and its
    ``hold`` for the arrays launched apart from their library's current stream."""
    if len(plan.buffers) == 1 and plan.buffers[0].startswith("*"):
        buffers = plan.buffers[0][1:]  # one read in C's tuple: not copied into another
    else:
        buffers = f"({''.join(f'{buffer}, ' for buffer in plan.buffers)})"
    before = [
        "    if stream == _order.stream:",
        "        ticket = None",
        "    else:",
        f"        buffers = {buffers}",
        "        ticket = _order.before(stream, buffers, _name, given)",
    ]
    after = ["    if ticket is not None:", "        _order.after(stream, buffers, ticket)"]
    kept = [
        f"(({''.join(f'{a}, ' for a in arrays)}) if unordered_{library.name} else ())"
        for library, arrays in plan.library_arrays.items()
    ]
    if kept:
        kept_expression = kept[0] if len(kept) == 1 else f"({''.join(f'*{k}, ' for k in kept)})"
        after += [f"    if kept := {kept_expression}:", "        _order.hold(stream, kept)"]
    return before, after


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


def depends_on(args: tuple[Any, ...], plan: ArgumentPlan) -> str:
    """The expression of what a :class:`~numbatune.launch.config.ByShape` launch function's
    result depends on: the winner, each read in C's ``shapes`` and each other argument's value
    (docs/concepts/launching.md)."""
    values = [f"a{i}" for i, value in enumerate(args) if kind_of(type(value)) is None]
    return f"(winner.index, {''.join(f'{part}, ' for part in [*plan.shapes, *values])})"


def _configure(depends: str | None) -> list[str]:
    """Code that sets ``config`` for ``winner``: with ``depends``, the one kept in ``_configs``
    (the launch function called for a value not seen yet: ``ByShape.remember``)."""
    said = [
        "    except Exception as error:  # the launch function's: say so",
        "        raise _launch_error(error, winner.params, _name) from error",
    ]
    if depends is None:
        return ["    try:", "        config = _config(*args, **winner.params)", *said]
    return [
        f"    depends = {depends}",
        "    try:",
        "        config = _configs[depends]",
        "    except (KeyError, TypeError):  # a value not seen yet: the launch function",
        "        try:",
        "            config = _config.remember(_configs, depends, args, winner.params)",
        *[f"    {line}" for line in said],
    ]


def _tail(
    plan: ArgumentPlan, stream: list[str], unavailable: str, in_call: bool, depends: str | None
) -> list[str]:
    """Code that launches ``winner`` once the front has run (``unavailable``: no compiled
    function for this signature yet); ``_numba`` and ``_failed`` take over where the packing
    or the launch fails, ``in_call`` telling ``_failed`` whether the general path may be asked."""
    values = ", ".join(plan.values)
    ordering, finishing = _ordering(plan)
    return [
        "    try:",
        "        function = _functions[winner.index]",
        "    except KeyError:",
        f"        {unavailable}",
        *_configure(depends),
        "    given = stream",
        *stream,
        "    try:",
        f"        parameters = _pack({values})",
        "    except (struct.error, OverflowError):  # a value numba types otherwise (an int over",
        "        return _numba(args, winner, config, given)  # 2**63) or converts (1e39 to f4)",
        *ordering,
        "    try:",
        "        error = _launch(",
        "            function, config, stream, parameters, _offsets, _context, _cooperative",
        "        )",
        "    except (TypeError, ValueError, OverflowError):  # a configuration it cannot take",
        "        _checked_config(config, _name)  # (says what is wrong with it, in words)",
        "        raise",
        "    if error:",
        f"        return _failed(error, args, winner, config, given, stream, {in_call})",
        *finishing,
    ]


def source(
    plan: ArgumentPlan,
    arity: int,
    custom_key: bool,
    checks_valid: bool,
    stream: list[str],
    depends: str | None = None,
) -> str:
    """The source of ``call`` and ``launch_winner`` for one signature (``stream``:
    :func:`stream_lines`'; ``depends``: :func:`depends_on`'s, for a ``ByShape`` launch function);
    with ``checks_valid``, ``call`` asks ``valid`` and hands a refusal to the general path."""
    key = "_key(args)" if custom_key else plan.key()
    general = "return _general(args, stream)"
    valid = [
        "    params = _valid_params[winner.index]",
        "    try:",
        "        runs = _valid(*args, **params)",
        "    except Exception as error:  # the valid function's: say so, as the general path",
        "        raise _launch_error(error, params, _name, 'valid') from error",
        "    if not runs:",
        f"        {general}",
    ]
    lines = [
        "def call(args, stream):",
        *_front(plan, arity, "return _next(args, stream)", "return _by_classes(args, stream)"),
        *(_find_winner(key, general) if custom_key else _find_kept_winner(key, general)),
        *(valid if checks_valid else []),
        *_tail(plan, stream, general, in_call=True, depends=depends),
        "def launch_winner(args, winner, stream):",
        *_front(plan, arity, "return False", "return False"),
        *_tail(plan, stream, "return False", in_call=False, depends=depends),
        "    return True",
    ]
    return "\n".join(lines)


def _find_winner(key: str, general: str) -> list[str]:
    """Code that finds the winner of ``key`` in the winner table, or runs ``general``."""
    return [
        "    try:",
        f"        winner = _winners[{key}]",
        "    except (KeyError, TypeError):  # a new key, or an unhashable one: the general path",
        f"        {general}",
    ]


def _find_kept_winner(key: str, general: str) -> list[str]:
    """:func:`_find_winner` for the default key, keeping the last key found and its winner in
    ``_last`` (a one-item list): a key equal to the last one, while the table's ``published``
    count stays, is the same winner. Comparing the key's parts, which are the same objects
    call after call, costs less than hashing them (0.5 us less with 18 arrays)."""
    return [
        f"    key = {key}",
        "    last = _last[0]",
        "    if key == last[0] and _winners.published == last[1]:",
        "        winner = last[2]",
        "    else:",
        "        published = _winners.published  # (read before the lookup: see WinnerTable)",
        *[f"    {line}" for line in _find_winner("key", general)],
        "        _last[0] = (key, published, winner)",
    ]
