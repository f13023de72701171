"""The record of the examples' kernels known to compile for sm_90, and how to renew it.

Compiling every variant of every example for the H100 (some 325 kernels, minutes of NVVM on
every core) is the one check of the examples that numba's simulator cannot make. Most of the
time nothing it compiles has changed, so the test suite compiles only what the record does not
hold: a kernel is named in it by its compiled-kernel store key
(:func:`numbatune.compile.compiler.store_key`), the digest of everything that decides its code
(the kernel and the values it reads, the variant, the argument types, the compute capability,
the versions of numba-cuda, NVVM and nvJitLink), the key under which numbatune itself trusts a
kernel compiled once to be the same kernel. A changed example, or another toolchain, has other
keys, and those kernels are compiled. One kernel of each example is compiled every time, so
that the compile itself is always exercised.

Renew the record after changing the examples (it takes minutes)::

    python -m tests.compiled_examples
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).resolve().parent / "data" / "examples-sm_90.json"
CC = (9, 0)


@dataclass(frozen=True)
class Kernel:
    """One kernel of an example: the tuned kernel, its variants that share the kernel (the first
    is compiled), the example arguments and the kernel's store key."""

    tuned: Any
    variants: tuple[Any, ...]
    args: tuple[Any, ...]
    key: str

    @property
    def name(self) -> str:
        return f"{self.tuned.function_id} {self.variants[0].label}"


def toolchain() -> tuple[str, ...]:
    """The versions a compile for a GPU records (asked of a process not under the simulator)."""
    code = (
        "import json; from numbatune.compilers import NUMBA_CUDA; "
        "print(json.dumps(NUMBA_CUDA.builds.toolchain()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0",
             "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    return tuple(json.loads(done.stdout.splitlines()[-1]))


def kernels(tools: tuple[str, ...]) -> Iterator[Kernel]:
    """Every kernel of every example, in the order ``numbatune compile examples`` builds them."""
    import numba

    from numbatune import demo
    from numbatune.compile.compiler import store_key

    for path in sorted((ROOT / "examples").glob("*.py")):
        for example in demo.examples_of(demo.load_module(path)):
            tuned, args = example(True)
            argtypes = tuple(numba.typeof(value) for value in args)
            template = tuned._template
            for build in template.by_build(tuned.variants):
                for members in build:
                    key = store_key(template, members[0], argtypes, CC, tools)
                    yield Kernel(tuned, tuple(members), args, key)


def compile_kernels(chosen: list[Kernel], directory: Path) -> list[Any]:
    """Compile ``chosen`` for sm_90 into ``directory``, as ``numbatune compile`` does: one row
    (:class:`numbatune.precompile.Compiled`) per variant."""
    from numbatune.precompile import precompile

    by_tuned: dict[tuple[int, int], tuple[Any, tuple[Any, ...], list[Any]]] = {}
    for kernel in chosen:
        by_tuned.setdefault((id(kernel.tuned), id(kernel.args)), (kernel.tuned, kernel.args, []))[
            2
        ].extend(kernel.variants)
    cases = [(tuned.with_variants(variants), args) for tuned, args, variants in by_tuned.values()]
    return precompile(cases, CC, directory)


def main() -> None:
    """Compile every kernel of every example and write the keys of those that compiled."""
    import numbatune  # noqa: F401  (first: the simulator, where there is no GPU)

    tools = toolchain()
    every = list(kernels(tools))
    with tempfile.TemporaryDirectory() as directory:
        rows = compile_kernels(every, Path(directory))
    failed = {f"{row.kernel} {row.variant}" for row in rows if row.error}
    compiled = {k.key: k.name for k in every if k.name not in failed}
    RECORD.parent.mkdir(exist_ok=True)
    record = {"cc": f"{CC[0]}.{CC[1]}", "toolchain": list(tools), "compiled": compiled}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(compiled)} of {len(every)} kernels compiled; {len(failed)} variants failed")


if __name__ == "__main__":
    main()
