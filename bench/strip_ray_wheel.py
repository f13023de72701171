"""Copy a Ray wheel without the parts a sweep does not use, so that it fits in what a lent GPU
machine carries (64 MiB in all; Ray 2.60.0's wheel is 79 MB, 39 MB without these parts).

``python bench/strip_ray_wheel.py ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl OUT_DIR``

Left out: the Java jars, RLlib, Serve, LLM, Tune, Train, Data and the dashboard's web client.
The wheel's RECORD loses their lines, so pip installs the rest as usual. The machine has no
network: bring Ray's dependencies' wheels too (``pip download ray==2.60.0 --only-binary=:all:
--python-version 3.12 --platform manylinux2014_x86_64``).
"""

import sys
import zipfile
from pathlib import Path

LEFT_OUT = (
    "ray/jars/", "ray/rllib/", "ray/serve/", "ray/llm/", "ray/tune/", "ray/train/", "ray/data/",
    "ray/dashboard/client/build/",
)  # fmt: skip


def strip(wheel: Path, folder: Path) -> Path:
    """Write ``wheel`` without :data:`LEFT_OUT` into ``folder`` (same name); its path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as copy:
        for info in source.infolist():
            if info.filename.startswith(LEFT_OUT):
                continue
            data = source.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = "\n".join(n for n in lines if not n.startswith(LEFT_OUT)).encode()
            copy.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return target


if __name__ == "__main__":
    print(strip(Path(sys.argv[1]), Path(sys.argv[2])))
