"""Keeping torch.compile's tracer out of numbatune's own code.

torch.compile (Dynamo) compiles each Python frame a compiled function runs, also those a call it
cannot trace starts, as a tuned kernel's (its ``__call__`` is the C extension's); the paths
below it read arrays, time variants and copy NumPy arrays, which Dynamo cannot run on its fake
tensors. The code a call of numbatune's enters first is marked here so that Dynamo runs it, and
all it calls, as written: a graph break that launches as an eager call does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def run_as_written(*functions: Callable[..., Any]) -> None:
    """Have torch.compile run ``functions`` (Python functions or bound methods), and all they
    call, as written, not traced; nothing where torch is not imported."""
    if "torch" not in sys.modules:
        return
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )

        skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
        for function in functions:
            set_code_exec_strategy(function.__code__, skip)
    except (ImportError, AttributeError, TypeError):  # a torch whose Dynamo has no such call
        return
