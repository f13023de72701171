"""Which tuned kernels are the same kernel.

A kernel's **function id** names its results on disk: its module and qualified name, the
script's path for a kernel of ``__main__``, and a digest of its closure values for a kernel a
factory made. Its folder name adds a digest of the id, so that ids that differ only in
characters a folder name cannot hold (``ядро`` and ``核``) differ. Its **sharing key** covers
all that decides its tuning: tuned kernels of one key (a factory's kernel made again on every
call) share their compiled kernels and results in this process.
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numbatune import references
from numbatune.devices import safe_name
from numbatune.values import stable_text
from numbatune.variants import Variant


def _digest(text: str, length: int = 12) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def function_id(function: types.FunctionType) -> str:
    """The name a kernel's results are kept under (see the module)."""
    module = getattr(function, "__module__", None) or "__main__"
    name = f"{module}.{function.__qualname__}"
    if module == "__main__":
        name += f" ({function.__code__.co_filename})"
    cells = [
        (variable, references.lookup(function, variable))
        for variable in function.__code__.co_freevars
    ]
    if cells:
        values = "\0".join(f"{v}={references.value_text(x)}" for v, x in cells)
        name += f" [closure {_digest(values, 8)}]"
    return name


def folder_name(function_id: str) -> str:
    """The folder a function id's entries are kept in: readable, and told apart by a digest."""
    return f"{safe_name(function_id)[:80]}-{_digest(function_id)}"


def function_folder(parent: Path, function_id: str) -> Path:
    """The folder under ``parent`` (a device's folder of the tune cache, or a compute
    capability's of the kernel store) that holds one function's entries."""
    return parent / folder_name(function_id)


def base_name(function_id: str) -> str:
    """The ``module.qualname`` part of a function id."""
    return function_id.split(" ", 1)[0]


def _callable_text(value: Any) -> str:
    if not isinstance(value, types.FunctionType) and hasattr(value, "__wrapped__"):
        value = value.__wrapped__  # (a callable object that wraps a function: by_shape's)
    if isinstance(value, types.FunctionType):
        return "\0".join(references.code_description(value))
    return references.source_of(value) if callable(value) else stable_text(value)


def sharing_key(
    code: str,
    options: dict[str, Any],
    signatures: Sequence[Any],
    variants: Sequence[Variant],
    launch: Any,
    settings: dict[str, Any],
) -> str:
    """The key under which tuned kernels share their state: ``code`` (the kernel's and its
    variants' device functions'), its jit ``options`` and ``signatures``, the variants in order,
    the launch function and the decorator's other ``settings``
    (:meth:`~numbatune.spec.KernelSpec.sharing_options`), functions by their code and the values
    they read."""
    parts = [
        code,
        stable_text(options),
        repr(tuple(signatures)),
        *(f"{v.label} {v.priority!r}" for v in variants),
        _callable_text(launch),
        *(f"{name}={_callable_text(value)}" for name, value in sorted(settings.items())),
    ]
    return _digest("\0".join(parts), 32)
