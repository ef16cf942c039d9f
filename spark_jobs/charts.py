"""PNG charts for the report: two shapes (lines over time, bars by label), matplotlib's Agg.

Figures are built with :class:`matplotlib.figure.Figure` directly, not pyplot, so nothing
global (backend, current figure) is touched and no display is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.dates import date2num
from matplotlib.figure import Figure

SIZE = (8.0, 3.6)
DPI = 100
EMPTY = "no data in the range read"


def _finish(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    return path


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()


def lines(
    path: Path, title: str, x: Sequence[datetime], series: Mapping[str, Sequence[float | None]],
    ylabel: str, *, empty: str = EMPTY,
) -> Path:
    """One line per series over time; nulls are gaps."""
    fig = Figure(figsize=SIZE)
    ax = fig.add_subplot()
    ax.set_title(title)
    if not x:
        _empty(ax, empty)
        return _finish(fig, path)
    when = list(map(date2num, x))  # matplotlib's own day numbers: what its date axis plots
    for name, values in series.items():
        points = [float("nan") if v is None else v for v in values]
        ax.plot(when, points, marker="o", markersize=3, label=name)
    ax.xaxis_date(tz=UTC)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize="small")
    fig.autofmt_xdate()
    return _finish(fig, path)


def bars(
    path: Path, title: str, labels: Sequence[str], series: Mapping[str, Sequence[float]],
    xlabel: str, *, stacked: bool = False, empty: str = EMPTY,
) -> Path:
    """Horizontal bars, one group per label (first label on top): side by side, or stacked."""
    fig = Figure(figsize=(SIZE[0], max(SIZE[1], 0.35 * len(labels) + 1.2)))
    ax = fig.add_subplot()
    ax.set_title(title)
    if not labels:
        _empty(ax, empty)
        return _finish(fig, path)
    positions = list(range(len(labels)))
    height = 0.8 if stacked else 0.8 / max(len(series), 1)
    left = [0.0] * len(labels)
    for i, (name, values) in enumerate(series.items()):
        if stacked:
            ax.barh(positions, values, height, left=left, label=name)
            left = [a + b for a, b in zip(left, values, strict=True)]
        else:
            ax.barh([p + i * height for p in positions], values, height, label=name)
    offset = 0.0 if stacked else height * (len(series) - 1) / 2
    ax.set_yticks([p + offset for p in positions], labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize="small")
    return _finish(fig, path)
