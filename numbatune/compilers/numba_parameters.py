"""numba-cuda's kernel parameters: how numba passes each argument to a compiled kernel, for the
fast path's plan (:mod:`numbatune.launch.layout`).

numba's parameter layout is not public API, so it is checked twice: numba-cuda must be a version
this module was written against (:data:`SUPPORTED_NUMBA_CUDA`), and the layout planned from
:func:`parameters` must match, parameter for parameter, the sizes the driver reports for the
compiled function (:func:`parameter_layout`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from numbatune.arraykinds import SIMULATOR
from numbatune.compilers.base import (
    ArrayParameters,
    Conversion,
    Parameters,
    ScalarParameters,
    TupleParameters,
)

#: numba-cuda versions whose kernel parameter layout this module was checked against.
SUPPORTED_NUMBA_CUDA = ("0.30.",)

#: The ``struct`` letter of an integer parameter by width in bits (signed; upper case: unsigned).
_INTEGER_LETTERS = {8: "b", 16: "h", 32: "i", 64: "q"}


def unsupported() -> str | None:
    """Why the fast launch is off in this process, or None when it is available."""
    if SIMULATOR:
        return "running under numba's simulator"
    from numba_cuda import __version__ as version

    if not version.startswith(SUPPORTED_NUMBA_CUDA):
        return f"numba-cuda {version} is not one of {SUPPORTED_NUMBA_CUDA}"
    return None


def parameters(numba_type: Any, value: Any) -> Parameters | None:
    """How numba passes ``value``, typed ``numba_type``, as kernel parameters; None where it is
    not planned (records, datetimes, Python ints of 64 unsigned bits, other types)."""
    from numba.core import types

    if isinstance(numba_type, types.Array):
        from numba.np.numpy_support import as_dtype

        try:
            itemsize = as_dtype(numba_type.dtype).itemsize
        except NotImplementedError:
            return None
        return ArrayParameters(
            itemsize, numba_type.ndim, numba_type.layout, numba_type.mutable, numba_type.aligned
        )
    if isinstance(numba_type, types.BaseTuple):
        return TupleParameters(tuple(numba_type))
    if type(value) is int and value >= 2**63:
        return None  # numba types these as uint64, smaller ints as int64: not by class
    if numba_type in (types.complex64, types.complex128):
        letter = "f" if numba_type == types.complex64 else "d"
        return ScalarParameters(((letter, Conversion.REAL), (letter, Conversion.IMAG)))
    return scalar_parameters(numba_type, types)


def scalar_parameters(numba_type: Any, types: ModuleType) -> ScalarParameters | None:
    """How a bool, integer or real scalar of ``numba_type`` is passed, as numba-cuda and
    numba-cuda-mlir pass it: its value in its type's width (a bool: one byte; a float16: its bits);
    None for other types. ``types`` is numba's types module, or numba-cuda-mlir's copy."""
    value = Conversion.VALUE
    if numba_type == types.boolean:
        return ScalarParameters((("?", value),))
    if isinstance(numba_type, types.Integer):
        letter = _INTEGER_LETTERS[numba_type.bitwidth]
        return ScalarParameters(((letter if numba_type.signed else letter.upper(), value),))
    if numba_type == types.float16:
        return ScalarParameters((("H", Conversion.HALF_BITS),))
    if numba_type in (types.float32, types.float64):
        return ScalarParameters((("f" if numba_type == types.float32 else "d", value),))
    return None


def planned_type(declared: Any, actual: Any, types: ModuleType | None = None) -> Any:
    """The type to plan an argument typed ``actual`` with, for a parameter of the compiled
    overload's type ``declared``; None where the plan cannot convert it as numba does.

    An array keeps its own layout (numba passes any array to a declared layout ``A`` with the
    same fields) and must have the declared dtype and rank; a scalar takes the declared type; a
    tuple, item by item. ``types``: numba's types module (by default), or numba-cuda-mlir's copy.
    """
    if types is None:
        from numba.core import types

    if declared == actual:
        return declared
    if isinstance(declared, types.Array) and isinstance(actual, types.Array):
        same = (declared.dtype, declared.ndim) == (actual.dtype, actual.ndim)
        return actual if same and declared.layout in ("A", actual.layout) else None
    if isinstance(declared, types.BaseTuple) and isinstance(actual, types.BaseTuple):
        if len(declared) != len(actual):
            return None
        items = [planned_type(d, a, types) for d, a in zip(declared, actual, strict=True)]
        return None if None in items else types.BaseTuple.from_types(items)
    whole = (types.Boolean, types.Integer)
    if isinstance(declared, types.Float) and isinstance(actual, (*whole, types.Float)):
        return declared
    if isinstance(declared, whole) and isinstance(actual, whole):
        return declared
    return None  # (a float to an integer: numba truncates, ``struct`` refuses)


def parameter_layout(function: Any) -> list[tuple[int, int]] | None:
    """(offset, size) of each parameter of a compiled function, as the driver reports them."""
    try:
        return [(info.offset, info.size) for info in function.kernel.arguments_info]
    except Exception:  # an old driver or cuda.core: no way to check the layout
        return None


def function_handle(function: Any) -> int:
    """The ``CUfunction`` of numba's compiled function in the current context.

    numba loads kernels as ``CUkernel``s; launching the context's ``CUfunction`` instead
    spares the driver a lookup on every launch (0.3-0.5 us on the H100 machine).
    """
    from cuda.bindings import driver

    handle = int(function.handle)
    error, resolved = driver.cuKernelGetFunction(driver.CUkernel(handle))
    return int(resolved) if not error else handle
