"""What pyproject.toml cannot say: the examples shipped inside the package.

The example kernels live in ``examples/`` at the top of the repository and are installed as
``numbatune/examples`` (``numbatune demo`` tunes them).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["numbatune", "numbatune.*"]), "numbatune.examples"],
    package_dir={"numbatune.examples": "examples"},
)
