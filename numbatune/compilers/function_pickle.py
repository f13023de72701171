"""Kernel functions pickled by value for compile workers, for any numba-like compiler.

A function crosses to a worker as its compiler's cloudpickle of it; a device function it calls
(anything with a ``py_func``) crosses as the pickle of its Python function and options and is
rebuilt there, once per worker: the kernels the worker builds next call the same dispatcher,
whose compiled overloads the compiler reuses, as it does in one process (each softmax kernel
compiled its device functions again: 29% of its build). The same pickle serves from a simulated
parent (``numbatune compile`` on a machine with no GPU) and a real one.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Jit:
    """A compiler's way of pickling kernel functions: its ``cuda`` module (whose ``jit`` makes
    device functions) and its cloudpickle, by module name (the form that crosses to a worker),
    and ``options_of``, the options a device function was made with."""

    cuda: str
    cloudpickle: str
    options_of: Callable[[Any], dict[str, Any]]

    def dumps(self, function: Any) -> bytes:
        """``function`` pickled by value with this compiler's cloudpickle, each device function
        it reaches as its Python function and options. Raises where it cannot be pickled."""
        cloudpickle = importlib.import_module(self.cloudpickle)
        jit = self

        class Pickler(cloudpickle.Pickler):
            def reducer_override(self, value: Any) -> Any:
                python_function = getattr(value, "py_func", None)
                if callable(python_function) and not isinstance(value, type):
                    pickled = jit.dumps((python_function, jit.options_of(value)))
                    return _device_function, (jit, pickled)
                return super().reducer_override(value)

        buffer = io.BytesIO()
        Pickler(buffer, protocol=5).dump(function)
        return buffer.getvalue()

    def loads(self, pickled: bytes) -> Any:
        """(In a worker) what :meth:`dumps` pickled, its device functions made once per process."""
        return importlib.import_module(self.cloudpickle).loads(pickled)


#: The device functions this process has rebuilt, by their compiler and pickle.
_device_functions: dict[tuple[Jit, bytes], Any] = {}
_DEVICE_FUNCTIONS_KEPT = 256


def _device_function(jit: Jit, pickled: bytes) -> Any:
    """The device function :meth:`Jit.dumps` pickled as ``pickled``, made once per process."""
    dispatcher = _device_functions.get((jit, pickled))
    if dispatcher is None:
        function, options = jit.loads(pickled)
        cuda = importlib.import_module(jit.cuda)
        dispatcher = cuda.jit(device=True, **options)(function)
        if len(_device_functions) >= _DEVICE_FUNCTIONS_KEPT:
            _device_functions.clear()
        _device_functions[jit, pickled] = dispatcher
    return dispatcher
