"""What pyproject.toml cannot say: the optional C extension, and the examples shipped inside the
package.

``numbatune._native`` (``_native.c`` and ``_order.c``: the launch, the driver's event calls, the
DLPack reads and the stream order) needs a C compiler and ``Python.h``, nothing of CUDA: it
loads the driver when it is imported. Where it cannot be built, the install goes on without it
and numbatune launches through cuda-bindings (``numbatune info`` says which it uses).

The example kernels live in ``examples/`` at the top of the repository and are installed as
``numbatune/examples`` (``numbatune demo`` tunes them).
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[*find_packages(include=["numbatune", "numbatune.*"]), "numbatune.examples"],
    package_dir={"numbatune.examples": "examples"},
    ext_modules=[
        Extension(
            "numbatune._native",
            sources=["numbatune/_native.c", "numbatune/_order.c"],
            libraries=["dl"],
            optional=True,  # a failed build leaves the install without it, with a warning
        )
    ],
)
