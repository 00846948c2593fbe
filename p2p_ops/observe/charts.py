"""The one way observe/ draws a PNG: headless matplotlib (the `plots` extra, imported only when a chart is drawn),
every axis labelled with its unit, the file written without following a link planted in its folder; and the
charts of a test run's report and of a soak (plain series in, so any long run can use them)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.observe.records import RequestRecord
from p2p_ops.observe.stats import percentile

Series = dict[str, list[tuple[float, float]]]  # label -> [(seconds since start, value)]


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


def over_time(out: Path, series: Series, ylabel: str, title: str, warmup_s: float) -> Optional[Path]:
    """One line per label against minutes since the start; None when there is nothing to draw."""
    drawn = {k: v for k, v in series.items() if len(v) >= 2}
    if not drawn:
        return None
    fig, ax = figure((7.2, 4.0))
    ax.axvspan(0, warmup_s / 60, color="0.9", label="warm-up (not in slopes)")
    for name, pts in sorted(drawn.items()):
        ax.plot([t / 60 for t, _ in pts], [v for _, v in pts], label=name, linewidth=1.2)
    label(ax, "minutes since the soak started", ylabel, title, fontsize=7, loc="best")
    return save(fig, out)


def ttft_per_minute(out: Path, minutes: list[tuple[int, Optional[float], Optional[float]]]) -> Optional[Path]:
    """(minute, p50 s, p99 s) -> both percentiles in ms per minute."""
    pts = [(m, p50, p99) for m, p50, p99 in minutes if p50 is not None and p99 is not None]
    if not pts:
        return None
    fig, ax = figure((7.2, 4.0))
    ax.plot([m for m, _, _ in pts], [p * 1000 for _, p, _ in pts], marker="o", label="p50")
    ax.plot([m for m, _, _ in pts], [p * 1000 for _, _, p in pts], marker="o", label="p99")
    label(ax, "minute of the soak", "time to first token (ms)", "TTFT per minute (client side, every request kind)")
    return save(fig, out)


def _nan(v: Optional[float]) -> float:
    """A missing percentile (no sample) as NaN: matplotlib leaves a gap there."""
    return float("nan") if v is None else v


def _by_concurrency(out: Path, levels: list[int], lines: list[tuple], ylabel: str, title: str) -> bool:
    """One (values, style, kwargs) line per entry against concurrency on a log2 axis."""
    fig, ax = figure()
    log2_ticks(ax, levels)
    for ys, style, kw in lines:
        ax.plot(levels, ys, style, **kw)
    label(ax, "concurrency (requests in flight)", ylabel, title, legend=len(lines) > 1)
    return bool(save(fig, out))


def ttft_vs_concurrency(out: Path, records: list[RequestRecord]) -> bool:
    ladder = [r for r in records if r.stage == "ladder" and r.ok and r.ttft_s is not None]
    levels = sorted({r.level for r in ladder})
    if not levels:
        return False
    p50, p99 = ([_nan(percentile([r.ttft_s for r in ladder if r.level == c], q)) * 1000 for c in levels]
                for q in (50, 99))
    return _by_concurrency(out, levels, [(p50, "o-", {"label": "p50"}), (p99, "s--", {"label": "p99"})],
                           "time to first token (ms)", "TTFT vs concurrency (ladder, cross-node prefixes)")


def throughput_vs_concurrency(out: Path, records: list[RequestRecord], walls: dict) -> bool:
    levels = sorted(level for (name, level) in walls if name == "ladder")
    if not levels:
        return False
    rps = []
    for c in levels:
        ok = [r for r in records if r.stage == "ladder" and r.level == c and r.ok]
        rps.append(len(ok) / walls[("ladder", c)] if walls[("ladder", c)] else 0.0)
    return _by_concurrency(out, levels, [(rps, "o-", {"color": "tab:green"})], "throughput (completed requests/s)",
                           "Throughput vs concurrency (ladder)")


def hit_ratio_over_time(out: Path, records: list[RequestRecord], bucket_s: float = 5.0) -> bool:
    ok = sorted((r for r in records if r.ok and r.prompt_tokens), key=lambda r: r.t_start_s)
    if not ok:
        return False
    def ratio(rs: list[RequestRecord]) -> float:
        return 100.0 * sum(r.cached_tokens for r in rs) / sum(r.prompt_tokens for r in rs) if rs else float("nan")

    wins = [[r for r in ok if k * bucket_s <= r.t_start_s < (k + 1) * bucket_s]
            for k in range(int(ok[-1].t_start_s // bucket_s) + 1)]
    xs = [(k + 0.5) * bucket_s for k, w in enumerate(wins) if w]
    wins = [w for w in wins if w]
    fig, ax = figure()
    ax.plot(xs, [ratio(w) for w in wins], "o-", label="all requests")
    ax.plot(xs, [ratio([r for r in w if r.cross_node]) for w in wins], "s--", label="prefix warmed on another node")
    ax.set_ylim(-5, 105)
    label(ax, f"time since start of run (s, {bucket_s:g} s buckets)", "cache hit ratio (% of prompt tokens)",
          "Hit ratio over time")
    return bool(save(fig, out))


def pulled_per_node(out: Path, records: list[RequestRecord], node_bytes: dict) -> bool:
    nodes = sorted({r.instance for r in records})
    if not nodes:
        return False
    tokens = [sum(r.cached_tokens for r in records if r.instance == n and r.ok and r.cross_node) for n in nodes]
    per_node = [node_bytes.get(n, {}) for n in nodes]
    if any(nb.get("kv_bytes_loaded") is not None for nb in per_node):
        right = [(nb.get("kv_bytes_loaded") or 0.0) / 2**20 for nb in per_node]
        right_label, right_axis = "KV loaded from LMCache (MiB)", "KV bytes loaded by the engine (MiB)"
    else:  # vLLM counts tokens, not bytes: show the loads its server pulled from peers instead
        right = [float(nb.get("p2p_loads") or 0.0) for nb in per_node]
        right_label = right_axis = "P2P loads by the node's server"
    fig, ax1 = figure()
    x = range(len(nodes))
    ax1.bar([i - 0.2 for i in x], tokens, width=0.4, label="tokens from peers (cross-node requests)")
    ax1.set_ylabel("tokens served from a peer's prefix")
    ax2 = ax1.twinx()
    ax2.bar([i + 0.2 for i in x], right, width=0.4, color="tab:orange", label=right_label)
    ax2.set_ylabel(right_axis)
    # Headroom so the legend never covers a bar.
    ax1.set_ylim(0, max(tokens + [1]) * 1.35)
    ax2.set_ylim(0, max(right + [0.001]) * 1.35)
    ax1.set_xticks(list(x), nodes)
    ax1.set_xlabel("instance")
    ax1.set_title("KV pulled per node")
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    return bool(save(fig, out))


def make_all(run_dir: Path, records: list[RequestRecord], walls: dict, node_bytes: dict) -> list[str]:
    plots = {"ttft_vs_concurrency.png": lambda p: ttft_vs_concurrency(p, records),
             "throughput_vs_concurrency.png": lambda p: throughput_vs_concurrency(p, records, walls),
             "hit_ratio_over_time.png": lambda p: hit_ratio_over_time(p, records),
             "pulled_per_node.png": lambda p: pulled_per_node(p, records, node_bytes)}
    return [name for name, draw in plots.items() if draw(run_dir / name)]
