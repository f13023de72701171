"""A picture of every variant's time per key, for ``numbatune report -o FILE``.

Where the variants vary over exactly two parameters, each key gets a heat map over them;
otherwise a bar per variant, named by what varies. The winner is marked; variants that failed
or were not timed say so. Times are in the unit that suits each panel's slowest, and a panel of
the simulator's times says so. Each panel is as tall as its bars or rows need, and the file is
cut around everything drawn. matplotlib is needed (``numbatune[report]``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numbatune.demo import stored_key_label, time_unit
from numbatune.devices import SIMULATED

#: Inches: the width of a panel, the height of a bar and of a heat map's row, the least height
#: of a panel, the room for a line of title, and the room under a panel for its ticks and label.
_WIDTH, _BAR, _ROW, _LEAST, _TITLE_LINE, _BELOW = 6.4, 0.28, 0.45, 1.2, 0.22, 0.8
_TIMED, _WINNER, _UNTIMED = "tab:blue", "tab:orange", "0.45"


def picture(entries: Sequence[Any], path: Path) -> None:
    """Draw one panel per stored key of ``entries`` (:class:`numbatune.cache.files.Entry`)
    into ``path``, whose suffix names the format; refused as :func:`check_format` says."""
    from matplotlib import pyplot

    check_format(path)
    figure = draw(entries)
    try:
        figure.savefig(path, bbox_inches="tight", pad_inches=0.2)
    finally:
        pyplot.close(figure)


def check_format(path: Path) -> None:
    """A ValueError, before anything is drawn, for a ``path`` with no suffix (matplotlib would
    write ``path`` + ``.png``) or one of a format matplotlib cannot write; an ImportError where
    matplotlib is not installed."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix not in formats:
        why = "it has no suffix" if not suffix else f"matplotlib cannot write .{suffix}"
        raise ValueError(
            f"cannot draw {path}: {why}; the suffix of -o FILE names the format: "
            f"{', '.join(sorted(formats))}"
        )


def draw(entries: Sequence[Any]) -> Any:
    """The figure of :func:`picture`: panels stacked top to bottom, one per entry."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    panels = [_Panel(entry) for entry in entries]
    height = sum(panel.height for panel in panels)
    figure = pyplot.figure(figsize=(_WIDTH, height))
    top = height
    for panel in panels:
        top -= panel.title_lines * _TITLE_LINE + 0.15
        bottom = top - panel.body
        axes = figure.add_axes((0.0, bottom / height, 1.0, panel.body / height))
        panel.draw(axes)
        top = bottom - _BELOW
    return figure


class _Panel:
    """One key's panel: its title, what varies, and how tall it is."""

    def __init__(self, entry: Any) -> None:
        self.results = entry.stored["results"]
        self.best = entry.stored["best_index"]
        self.values = [{**r["params"], **r["jit"]} for r in self.results]
        names = list(dict.fromkeys(name for values in self.values for name in values))
        self.varying = [n for n in names if len({v.get(n) for v in self.values}) > 1]
        simulated = entry.device == SIMULATED.name
        where = "numba's simulator: times mean nothing" if simulated else entry.device
        title = f"{entry.function}: {stored_key_label(entry.key)} ({where})"
        self.title = textwrap.wrap(title, 80)
        timed = [r["median_s"] for r in self.results if r["median_s"] is not None]
        self.unit, self.scale = time_unit(max(timed, default=0.0))
        self.title_lines = len(self.title)
        rows = _ROW * len(self._axis(0)) if self.is_heat_map else _BAR * len(self.results)
        self.body = max(_LEAST, rows)
        self.height = self.title_lines * _TITLE_LINE + 0.15 + self.body + _BELOW

    @property
    def is_heat_map(self) -> bool:
        """Whether the variants vary over exactly two parameters, which each of them has."""
        return len(self.varying) == 2 and all(set(self.varying) <= set(v) for v in self.values)

    def _axis(self, index: int) -> list[str]:
        """The values of the heat map's ``index``-th varying parameter (0: rows), in order."""
        return sorted({v[self.varying[index]] for v in self.values}, key=_number)

    def _times(self) -> list[float | None]:
        return [
            r["median_s"] / self.scale if r["median_s"] is not None else None for r in self.results
        ]

    def draw(self, axes: Any) -> None:
        """Draw the heat map or the bars into ``axes``, the winner marked."""
        axes.set_title("\n".join(self.title), fontsize=9, loc="left")
        if self.is_heat_map:
            self._heat_map(axes)
        else:
            self._bars(axes)

    def _bars(self, axes: Any) -> None:
        times = self._times()
        labels = [
            ", ".join(f"{n}={v[n]}" for n in self.varying if n in v) or r["variant"]
            for r, v in zip(self.results, self.values, strict=True)
        ]
        colours = [_WINNER if i == self.best else _TIMED for i in range(len(times))]
        positions = range(len(times))
        axes.barh(positions, [t or 0.0 for t in times], color=colours)
        axes.set_yticks(positions, labels, fontsize=8)
        axes.invert_yaxis()  # the variants top to bottom, in their order
        axes.set_ylim(len(times) - 0.5, -0.5)
        longest = max((t for t in times if t is not None), default=1.0)
        axes.set_xlim(0, longest * 1.3)
        for position, (time, result) in enumerate(zip(times, self.results, strict=True)):
            if time is None:
                axes.text(0, position, " " + _untimed(result), va="center", color=_UNTIMED)
            elif position == self.best:
                text = f" winner, {time:.3g} {self.unit}"
                axes.text(time, position, text, va="center", weight="bold")
        axes.ticklabel_format(axis="x", style="plain", useOffset=False)
        axes.set_xlabel(f"median time ({self.unit})")

    def _heat_map(self, axes: Any) -> None:
        import numpy as np
        from matplotlib.patches import Rectangle

        rows, columns = self._axis(0), self._axis(1)
        grid = np.full((len(rows), len(columns)), np.nan)
        place = [(rows.index(v[self.varying[0]]), columns.index(v[self.varying[1]]))
                 for v in self.values]  # fmt: skip
        for (row, column), time, result in zip(place, self._times(), self.results, strict=True):
            if time is None:
                axes.text(column, row, _untimed(result), ha="center", va="center", fontsize=7)
            else:
                grid[row, column] = time
        image = axes.imshow(grid, cmap="viridis_r", aspect="auto")
        axes.set_yticks(range(len(rows)), rows)
        axes.set_xticks(range(len(columns)), columns)
        axes.set_ylabel(self.varying[0])
        axes.set_xlabel(self.varying[1])
        row, column = place[self.best]
        axes.add_patch(
            Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5)
        )
        axes.text(
            column, row, "winner", ha="center", va="center", color="red", weight="bold",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )  # fmt: skip
        axes.figure.colorbar(image, ax=axes, label=f"median time ({self.unit})")


def _untimed(result: dict[str, Any]) -> str:
    if result.get("error"):
        return "failed"
    return "wrong result" if result.get("mismatch") else "not timed"


def _number(text: str) -> tuple[int, float, str]:
    """Numbers in their order, then other values by their text."""
    try:
        return 0, float(text), ""
    except ValueError:
        return 1, 0.0, text
