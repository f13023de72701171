"""Recording the keys a program meets, to tune them later (``numbatune sweep``).

With the ``record`` setting (a file), each tuned kernel's first call of each key in a process
(on the general path: the fast path is untouched) appends one line of JSON to the file
(:func:`write`): the kernel, the key's text, and how to rebuild each argument
(:func:`describe`). Processes and ranks may share the file (:func:`_append`). A sweep reads
each (kernel, key) once, and names each line that is not a record (:func:`read`).

The same format, written by hand, lists shapes to sweep::

    {"format": 1, "function": "app.kernels.saxpy", "module": "app.kernels",
     "qualname": "saxpy", "key": "...", "arguments": [
        {"scalar": 2.0, "type": "float32"},
        {"shape": [1048576], "strides": [4], "dtype": "float32"}, ...]}

(``key`` may be left out: the sweep computes it.)
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from numbatune import arrays
from numbatune.errors import CacheFileError

FORMAT = 1


def served_keys_path(cache_dir: Path) -> Path:
    """Where the keys served untuned (``on_miss`` ``nearest`` or ``background``) are recorded
    when the ``record`` setting names no file, and where ``numbatune sweep`` looks then."""
    return cache_dir / "record.jsonl"


#: (path, function id, key text) of the lines this process wrote.
_written: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class Record:
    """One recorded call: which kernel, the key's text, how to rebuild its arguments."""

    function: str
    module: str
    qualname: str
    key: str | None
    arguments: tuple[dict[str, Any], ...]


def describe(value: Any) -> dict[str, Any]:
    """What a sweep needs to rebuild an argument like ``value``."""
    found = arrays.read(value)
    if found is not None:
        shape, dtype, _ = found
        return {"shape": list(shape), "strides": list(arrays.strides(value)), "dtype": dtype}
    if isinstance(value, np.generic):
        return {"scalar": _plain(value.item()), "type": value.dtype.name}
    if isinstance(value, bool | int | float | complex):
        return {"scalar": _plain(value), "type": type(value).__name__}
    raise TypeError(f"cannot record an argument of type {type(value).__name__}: {value!r}")


def _plain(value: Any) -> Any:
    """A scalar as JSON can hold it: a complex number as ``[real, imaginary]``."""
    return [value.real, value.imag] if isinstance(value, complex) else value


def rebuild(description: dict[str, Any], seed: int = 0) -> Any:
    """An argument like the one ``description`` describes: a numba device array of that shape,
    strides and dtype (floats uniform in [0, 1), other types zeros), or the scalar."""
    if "scalar" in description:
        kind, value = description["type"], description["scalar"]
        if isinstance(value, list):  # a complex number, [real, imaginary]
            value = complex(*value)
        python = {"bool": bool, "int": int, "float": float, "complex": complex}.get(kind)
        return python(value) if python is not None else np.dtype(kind).type(value)
    dtype = np.dtype(description["dtype"])
    shape = tuple(description["shape"])
    if dtype.kind in "fc":
        host = np.random.default_rng(seed).random(shape).astype(dtype)
    else:
        host = np.zeros(shape, dtype)
    return arrays.laid_out(host, tuple(description["strides"]))


def write(
    path: Path, function: str, module: str, qualname: str, key_text: str, args: tuple[Any, ...]
) -> None:
    """Append the line of one call to the record at ``path``, unless this process wrote it (a
    write that raised or was cut short is tried again when the key is next met)."""
    seen = (str(path), function, key_text)
    with _lock:  # held while writing: two threads meeting the same key write it once
        if seen in _written:
            return
        record = Record(function, module, qualname, key_text, tuple(map(describe, args)))
        line = json.dumps({"format": FORMAT, **dataclasses.asdict(record)})
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _append(descriptor, line)
        finally:
            os.close(descriptor)
        _written.add(seen)


def _append(descriptor: int, line: str) -> None:
    """Append ``line`` to the file open at ``descriptor``, in one write, as a line of its own
    (after a line cut short, a newline ends that one first), the file locked (``flock``) from
    reading its last byte to the end of the write: another process's line, half written, would
    look cut short. Raises OSError where this line is cut short itself."""
    fcntl.flock(descriptor, fcntl.LOCK_EX)  # (released when the descriptor is closed)
    size = os.fstat(descriptor).st_size
    after_a_cut = size > 0 and os.pread(descriptor, 1, size - 1) != b"\n"
    data = (("\n" if after_a_cut else "") + line + "\n").encode()
    written = os.write(descriptor, data)
    if written < len(data):
        raise OSError(f"the line was cut short ({written} of its {len(data)} bytes written)")


@dataclass(frozen=True)
class Unreadable:
    """A line of a record file that is not a record (cut short, damaged, another format)."""

    line: int
    why: str


@dataclass(frozen=True)
class RecordFile:
    """What a record file holds: its records, each (kernel, key) once in the order met, and
    the lines that are not records."""

    records: tuple[Record, ...]
    unreadable: tuple[Unreadable, ...]


def read(path: Path) -> RecordFile:
    """The records in the file at ``path``, and the lines that are not records; a
    :class:`~numbatune.errors.CacheFileError` when it cannot be read."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as error:
        raise CacheFileError(f"cannot read the record {path}: {error}") from error
    found: dict[tuple[str, str], Record] = {}
    unreadable = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = _record(json.loads(line))
        except (ValueError, TypeError, KeyError) as error:
            unreadable.append(Unreadable(number, f"not a numbatune record ({error})"))
            continue
        same = record.key if record.key is not None else json.dumps(record.arguments)
        found.setdefault((record.function, same), record)
    return RecordFile(tuple(found.values()), tuple(unreadable))


def _record(item: Any) -> Record:
    if not isinstance(item, dict) or item.get("format") != FORMAT:
        raise ValueError(f"format {item.get('format') if isinstance(item, dict) else item!r}")
    arguments = item["arguments"]
    if not isinstance(arguments, list) or not all(_argument(a) for a in arguments):
        raise ValueError("arguments must be a list of arrays (shape, strides, dtype) and scalars")
    names = [item[name] for name in ("function", "module", "qualname")]
    if not all(isinstance(name, str) for name in names) or not isinstance(item.get("key", ""), str):
        raise ValueError("function, module, qualname and key must be text")
    return Record(*names, item.get("key"), tuple(arguments))


def _argument(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if "scalar" in item:
        return isinstance(item.get("type"), str)
    shape, strides, dtype = item.get("shape"), item.get("strides"), item.get("dtype")
    if not (isinstance(shape, list) and isinstance(strides, list) and isinstance(dtype, str)):
        return False
    itemsize = np.dtype(dtype).itemsize  # TypeError: not a dtype
    return (
        itemsize > 0  # (a flexible dtype with no size, "S" or "V", holds nothing)
        and len(shape) == len(strides)
        and all(type(n) is int and n >= 0 for n in shape)
        and all(type(s) is int and s % itemsize == 0 for s in strides)
    )


def rebuild_all(arguments: Sequence[dict[str, Any]]) -> tuple[Any, ...]:
    """Every argument of a record, rebuilt (:func:`rebuild`), arrays filled from seeds 0, 1, ..."""
    return tuple(rebuild(description, seed) for seed, description in enumerate(arguments))
