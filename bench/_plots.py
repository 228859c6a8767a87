"""One look for every chart of the report: matplotlib off-screen, one size, saved as PNG."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def plot(
    path: Path, draw: Callable[[Any], None], *, size: tuple[float, float] = (6.4, 3.6)
) -> None:
    """Draw on one set of axes with `draw(axes)` and save the figure to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=size, dpi=100)
    draw(axes)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def goal_line(axes: Any, value: float, label: str, *, vertical: bool = False) -> None:
    """A dashed line at the issue's goal, labelled in the legend."""
    line = axes.axvline if vertical else axes.axhline
    line(value, color="tab:red", linestyle="--", linewidth=1, label=label)
