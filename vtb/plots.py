"""Saving the run's and the leaderboard's figures: one PNG at print resolution and an SVG beside it.

Matplotlib with the Agg backend (no display); every bar carries its value, so a bar at 0 shows
as "0.000" rather than vanishing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPI = 200


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label_bars(ax: Any, bars: Any, fmt: str = "%.3f") -> None:
    """The value over each bar (a zero bar shows its 0)."""
    ax.bar_label(bars, fmt=fmt, padding=2, fontsize=8)


def save(fig: Any, path: Path) -> None:
    """`path` (PNG, DPI) and the same figure as SVG beside it; the figure is closed."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    fig.savefig(Path(path).with_suffix(".svg"))
    pyplot().close(fig)
