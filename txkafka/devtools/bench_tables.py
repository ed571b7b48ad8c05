"""The markdown table and the grouped bar chart that the benchmarks' reports share (formats,
serde, avro): one way to format a figure and to draw rows/s side by side."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence


def cell(v: Any) -> str:
    """A figure as a table shows it: counts and rates with thousands separators, ratios and
    sizes as given, a missing figure as ``-``."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"
    return str(v)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; each value goes through :func:`cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Panel:
    """One chart panel: a group of bars per label, one bar per series (a missing value: none)."""

    title: str
    labels: list[str]
    series: dict[str, list[float | None]]
    ylabel: str


def grouped_bars(panels: Sequence[Panel], path: str, width: float = 5.5) -> None:
    """Draw the panels side by side into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 4.5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        bar = 0.8 / max(len(panel.series), 1)
        for j, (name, values) in enumerate(panel.series.items()):
            ax.bar([i + j * bar for i in range(len(panel.labels))],
                   [v or 0 for v in values], bar, label=name)
        ax.set_xticks([i + bar * (len(panel.series) - 1) / 2 for i in range(len(panel.labels))],
                      panel.labels, fontsize=8)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
