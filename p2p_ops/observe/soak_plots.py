"""PNG plots of a soak run (matplotlib, headless): a metric per process over time, with the warm-up shaded (it
is left out of the slopes), and TTFT per minute. Plain series in, so any long run can use them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from p2p_ops.observe import charts

Series = dict[str, list[tuple[float, float]]]  # label -> [(seconds since start, value)]


def over_time(out: Path, series: Series, ylabel: str, title: str, warmup_s: float) -> Optional[Path]:
    """One line per label against minutes since the start; None when there is nothing to draw."""
    drawn = {k: v for k, v in series.items() if len(v) >= 2}
    if not drawn:
        return None
    fig, ax = charts.figure((7.2, 4.0))
    ax.axvspan(0, warmup_s / 60, color="0.9", label="warm-up (not in slopes)")
    for label, pts in sorted(drawn.items()):
        ax.plot([t / 60 for t, _ in pts], [v for _, v in pts], label=label, linewidth=1.2)
    charts.label(ax, "minutes since the soak started", ylabel, title, fontsize=7, loc="best")
    return charts.save(fig, out)


def ttft_per_minute(out: Path, minutes: list[tuple[int, Optional[float], Optional[float]]]) -> Optional[Path]:
    """(minute, p50 s, p99 s) -> both percentiles in ms per minute."""
    pts = [(m, p50, p99) for m, p50, p99 in minutes if p50 is not None and p99 is not None]
    if not pts:
        return None
    fig, ax = charts.figure((7.2, 4.0))
    ax.plot([m for m, _, _ in pts], [p * 1000 for _, p, _ in pts], marker="o", label="p50")
    ax.plot([m for m, _, _ in pts], [p * 1000 for _, _, p in pts], marker="o", label="p99")
    charts.label(ax, "minute of the soak", "time to first token (ms)",
                 "TTFT per minute (client side, every request kind)")
    return charts.save(fig, out)
