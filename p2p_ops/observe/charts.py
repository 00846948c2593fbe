"""The one way observe/ draws a PNG: headless matplotlib (the `plots` extra, imported only when a chart is drawn),
every axis labelled with its unit, the file written without following a link planted in its folder."""

from __future__ import annotations

import io
from pathlib import Path

from p2p_ops import files


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(figsize: tuple[float, float] = (6.4, 4.0), ncols: int = 1):
    """(fig, ax), or (fig, [ax, ...]) for several columns."""
    return pyplot().subplots(1, ncols, figsize=figsize)


def label(ax, xlabel: str, ylabel: str, title: str, legend: bool = True, grid: str = "both", **legend_kw) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis=grid, alpha=0.3)
    if legend:
        ax.legend(**legend_kw)


def log2_ticks(ax, xs: list) -> None:
    """A log2 x axis ticked at exactly the values drawn."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])


def save(fig, out: Path) -> Path:
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    pyplot().close(fig)
    files.write_bytes(out, png.getvalue())   # 0600, as everything written under a run folder
    return out
