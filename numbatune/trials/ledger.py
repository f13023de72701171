"""Which variants have run on this kind of device, so that their trial runs are not repeated: in
this process (per :class:`~numbatune.compile.compiler.Compiler`) and in the kernel store on disk.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from numbatune.compile.compiler import Compiler
from numbatune.devices import current_kind
from numbatune.variants import Variant

#: The keys (:func:`_ran_key`) of the variants that ran, by compiler.
_ran: weakref.WeakKeyDictionary[Compiler, set[str]] = weakref.WeakKeyDictionary()


def _ran_key(compiler: Compiler, variant: Variant, args: tuple[Any, ...]) -> str:
    kernel = compiler.kernel_key(variant, args)
    return f"{kernel} {variant.label} {current_kind().partition}"


def has_run(
    compiler: Compiler, variant: Variant, args: tuple[Any, ...], cache_dir: Path | None
) -> bool:
    """Whether ``variant`` (of ``compiler``'s tuned kernel) ran on this kind of device for the
    types of ``args``, which decide its kernel: in this process, or in an earlier one whose
    kernel store, in ``cache_dir`` (the tuning's; None: none), this one reads."""
    key = _ran_key(compiler, variant, args)
    ran = _ran.setdefault(compiler, set())
    if key in ran:
        return True
    store = compiler.kernel_store(cache_dir)
    if store is None or not store.ran(key):
        return False
    ran.add(key)
    return True


def mark_run(
    compiler: Compiler, variant: Variant, args: tuple[Any, ...], cache_dir: Path | None
) -> None:
    """Remember that ``variant`` ran for the types of ``args``, in this process and in the
    kernel store (see :func:`has_run` for the parameters)."""
    key = _ran_key(compiler, variant, args)
    _ran.setdefault(compiler, set()).add(key)
    store = compiler.kernel_store(cache_dir)
    if store is not None:
        store.mark_ran(key)
