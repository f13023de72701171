"""What pyproject.toml cannot say: the C extension, and the examples shipped inside the package.

``numbatune._native`` (``_native.c``, ``_order.c`` and ``_launcher.c``, made one module by
``_module.c``: the launch, the driver's event calls, the array reads, the stream order and the
fast paths' launchers) needs a C compiler and ``Python.h``, nothing of CUDA: it loads the
driver when it is imported. numbatune cannot run without it: where it cannot be built, the
install stops with one line that says what to install.

The example kernels live in ``examples/`` at the top of the repository and are installed as
``numbatune/examples`` (``numbatune demo`` tunes them).

The package index shows README.md with its links to files of the repository (``docs/...``)
written out as text: there they would lead nowhere.
"""

import re
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, LinkError, PlatformError

#: A Markdown link to a path of the repository: not to a web address nor to an anchor.
_LOCAL_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#)([^)]+)\)")


def _index_description() -> str:
    """README.md for the package index: each local link as its text and the path."""
    readme = (Path(__file__).parent / "README.md").read_text(encoding="utf-8")

    def as_text(link: re.Match) -> str:
        text, path = link.groups()
        return f"`{path}`" if text.strip("`") == path else f"{text} (`{path}` in the source tree)"

    return _LOCAL_LINK.sub(as_text, readme)


#: What a build that cannot compile the extension says (its only line of error).
NEEDS_A_COMPILER = (
    "numbatune needs a C compiler and Python's headers to build its extension "
    "numbatune._native: install gcc and python3-dev (Debian/Ubuntu) or gcc and python3-devel "
    "(Fedora/RHEL), then install numbatune again"
)


class _BuildExtension(build_ext):
    """``build_ext`` that stops, saying what to install, where the extension cannot be
    compiled (setuptools' own message ends its compiler's output with a traceback)."""

    def build_extension(self, extension: Extension) -> None:
        try:
            super().build_extension(extension)
        except (CCompilerError, CompileError, LinkError, PlatformError, OSError):
            raise SystemExit(f"error: {NEEDS_A_COMPILER}") from None


setup(
    long_description=_index_description(),
    long_description_content_type="text/markdown",
    packages=[*find_packages(include=["numbatune", "numbatune.*"]), "numbatune.examples"],
    package_dir={"numbatune.examples": "examples"},
    ext_modules=[
        Extension(
            "numbatune._native",
            sources=[
                f"numbatune/{name}.c" for name in ("_module", "_native", "_order", "_launcher")
            ],
            depends=["numbatune/_native.h"],
            libraries=["dl"],
        )
    ],
    cmdclass={"build_ext": _BuildExtension},
)
