"""The ``numbatune`` command line (also ``python -m numbatune``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _demo(arguments: argparse.Namespace) -> int:
    from numbatune import demo

    directory = arguments.examples or demo.find_examples_dir()
    demo.main(demo.load_examples(directory), small=arguments.small)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``numbatune`` command."""
    parser = argparse.ArgumentParser(
        prog="numbatune", description="Autotuning for Numba-CUDA kernels."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="tune the example kernels and print a table")
    demo.add_argument("--examples", type=Path, help="directory of example modules")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", default=None, help="small sizes")
    size.add_argument("--full", dest="small", action="store_false", help="GPU-sized inputs")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    arguments = build_parser().parse_args(argv)
    return arguments.run(arguments)


if __name__ == "__main__":
    sys.exit(main())
