"""Tuned kernels as torch operators, for torch.compile and CUDA graphs (importing it imports
torch).

Inside a function that torch.compile compiles, a tuned kernel is a graph break that torch runs
as written (:mod:`numbatune.eager`). To have the compiled graph hold it instead
(``fullgraph=True``, ``mode="reduce-overhead"``), make it an operator with :func:`custom_op`
(torch's ``torch.library.custom_op``, with the arguments it writes declared).
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Iterable
from typing import Any

import torch

from numbatune.dispatch import TunedKernel, run_entries_as_written

run_entries_as_written()  # (for tuned kernels made before torch was imported)


def custom_op(
    kernel: TunedKernel,
    *,
    mutates_args: Iterable[str],
    name: str | None = None,
    schema: str | None = None,
) -> Any:
    """The tuned kernel as a torch operator, ``numbatune::NAME``, that torch.compile traces.

    Call the operator as the kernel, ``op(*args)``: it launches the key's winner on torch's
    current stream (tuning first on a new key, outside a CUDA graph capture) and returns
    nothing. Its fake implementation, which torch traces with, launches nothing.

    Parameters
    ----------
    kernel
        The tuned kernel.
    mutates_args
        The names of the kernel's parameters it writes: torch orders and functionalizes the
        operator by them.
    name
        The operator's name in the ``numbatune`` namespace (default: the kernel's name); one
        per operator in a process.
    schema
        The operator's schema, as torch writes it, for kernels that take scalars:
        ``"(Tensor x, Tensor(a!) out, float alpha) -> ()"``. Default: every parameter a
        tensor, those in ``mutates_args`` written.

    Returns
    -------
    torch.library.CustomOpDef
        The operator (also ``torch.ops.numbatune.NAME``).

    Raises
    ------
    ValueError
        ``mutates_args`` names a parameter the kernel does not have, or ``name`` is not an
        identifier.
    """
    parameters = list(inspect.signature(kernel.py_func).parameters)
    written = [mutates_args] if isinstance(mutates_args, str) else list(mutates_args)
    unknown = sorted(set(written) - set(parameters))
    if unknown:
        raise ValueError(
            f"custom_op: mutates_args names {unknown}, which {kernel.name} does not take "
            f"(its parameters: {parameters})"
        )
    name = kernel.name if name is None else name
    if not name.isidentifier():
        raise ValueError(f"custom_op: name must be an identifier, got {name!r}")
    if schema is None:
        aliases = iter(string.ascii_lowercase)
        tensors = [f"Tensor({next(aliases)}!) {p}" if p in written else f"Tensor {p}"
                   for p in parameters]  # fmt: skip
        schema = f"({', '.join(tensors)}) -> ()"

    def launch(*args: Any) -> None:
        kernel(*args)

    operator = torch.library.custom_op(
        f"numbatune::{name}", launch, mutates_args=written, schema=schema
    )
    operator.register_fake(_launches_nothing)
    return operator


def _launches_nothing(*args: Any) -> None:
    """The operators' fake implementation: what they return (nothing), without launching."""
