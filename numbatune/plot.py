"""A picture of every variant's time per key, for ``numbatune report -o FILE``.

Where the variants vary over exactly two parameters, each key gets a heat map over them (the
landscape at a glance); otherwise a bar per variant. matplotlib is needed (``numbatune[report]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def picture(entries: Sequence[Any], path: Path) -> None:
    """Draw one panel per stored key of ``entries`` (:class:`numbatune.cache.files.Entry`)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(len(entries), 1, figsize=(8, 3.5 * len(entries)), squeeze=False)
    for panel, entry in zip(axes[:, 0], entries, strict=True):
        results = entry.stored["results"]
        params = [r["params"] for r in results]
        names = sorted({name for p in params for name in p})
        varying = [n for n in names if len({p.get(n) for p in params}) > 1]
        times = [r["median_s"] * 1e6 if r["median_s"] is not None else None for r in results]
        if len(varying) == 2:
            _heat_map(panel, params, times, varying)
        else:
            labels = [r["variant"] for r in results]
            panel.barh(labels, [t or 0 for t in times])
            panel.set_xlabel("median time (us); 0: failed or not measured")
        panel.set_title(f"{entry.function} {entry.key}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def _heat_map(panel: Any, params: list[dict], times: list, varying: list[str]) -> None:
    import numpy as np

    rows = sorted({p[varying[0]] for p in params}, key=_number)
    columns = sorted({p[varying[1]] for p in params}, key=_number)
    grid = np.full((len(rows), len(columns)), np.nan)
    for p, t in zip(params, times, strict=True):
        if t is not None:
            grid[rows.index(p[varying[0]]), columns.index(p[varying[1]])] = t
    image = panel.imshow(grid, cmap="viridis_r")
    panel.set_yticks(range(len(rows)), rows)
    panel.set_xticks(range(len(columns)), columns)
    panel.set_ylabel(varying[0])
    panel.set_xlabel(varying[1])
    panel.figure.colorbar(image, ax=panel, label="median time (us)")


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text
