"""PNG charts for the placement and calibration benchmarks (matplotlib, headless; every axis has its unit)."""

from __future__ import annotations

from pathlib import Path

from p2p_ops.observe import charts


def placement(out_dir: Path, arms: list) -> list[str]:
    """Served req/s, TTFT p50/p90 and token sources per policy, P2P on next to off; an arm run more than once is
    its median with the repeats' min-max as an error bar."""
    arms = [a for a in arms if not a.error]
    policies = list(dict.fromkeys(a.policy for a in arms))
    if not policies:
        return []
    on = {a.policy: a for a in arms if a.p2p}
    off = {a.policy: a for a in arms if not a.p2p}
    x = range(len(policies))
    written = []

    def bars(ax, figure, ylabel, title):
        for shift, side, label in ((-0.2, on, "P2P on"), (0.2, off, "P2P off")):
            arms = [side.get(p) for p in policies]
            heights = [getattr(a, figure) if a else 0 for a in arms]
            ends = [a.spread.get(figure) if a and a.spread.get(figure) else [h, h] for a, h in zip(arms, heights)]
            ax.bar([i + shift for i in x], heights, 0.4, label=label,
                   yerr=[[max(h - lo, 0) for h, (lo, _) in zip(heights, ends)],
                         [max(hi - h, 0) for h, (_, hi) in zip(heights, ends)]], capsize=3)
        ax.set_xticks(list(x), policies, rotation=20)
        charts.label(ax, "", ylabel, title, grid="y")

    fig, ax = charts.figure((7, 4))
    bars(ax, "req_per_s", "served requests/s", "Throughput by placement")
    written.append(charts.save(fig, out_dir / "placement_throughput.png").name)
    fig, axes = charts.figure((10, 4), ncols=2)
    bars(axes[0], "ttft_p50_ms", "TTFT p50 (ms)", "TTFT p50 by placement")
    bars(axes[1], "ttft_p90_ms", "TTFT p90 (ms)", "TTFT p90 by placement")
    written.append(charts.save(fig, out_dir / "placement_ttft.png").name)
    fig, ax = charts.figure((8, 4))
    shown = [(f"{p}\nP2P {tag}", side[p]) for p in policies for side, tag in ((on, "on"), (off, "off")) if p in side]
    labels = [name for name, _ in shown]
    local, peer, recomputed = ([getattr(a, f) for _, a in shown]
                               for f in ("local_tokens", "peer_tokens", "recomputed_tokens"))
    ax.bar(labels, local, label="local cache")
    ax.bar(labels, peer, bottom=local, label="from a peer")
    ax.bar(labels, recomputed, bottom=[a + b for a, b in zip(local, peer)], label="recomputed")
    ax.tick_params(axis="x", labelsize=7)
    charts.label(ax, "", "prompt tokens", "Where prompt tokens came from", grid="y")
    written.append(charts.save(fig, out_dir / "placement_tokens.png").name)
    return written


def crossover(out: Path, rows: list) -> str:
    fig, ax = charts.figure()
    xs = [r.tokens for r in rows]
    ax.plot(xs, [r.ttft_pulled_b_s * 1000 for r in rows], "o-", label="pulled from a peer")
    ax.plot(xs, [r.ttft_recompute_b_s * 1000 for r in rows], "s-", label="recomputed")
    charts.log2_ticks(ax, xs)
    charts.label(ax, "shared prefix length (tokens)", "TTFT median (ms)", "Pull vs recompute")
    return charts.save(fig, out).name


def transfer_series(rows: list[dict]) -> dict[str, list]:
    """What the transfer plot draws, by size in MiB: failed sizes only in "failed", never as a figure."""
    mib = [r["payload_bytes"] / 2**20 for r in rows]
    ok = [(x, r) for x, r in zip(mib, rows) if r["ok"] and r.get("median_gbps") is not None]
    return {"mib": [x for x, _ in ok], "gbps": [r["median_gbps"] for _, r in ok],
            # below and above the median: the repeated sweeps' min-max (0 for one sweep)
            "gbps_err": [[r["median_gbps"] - (r.get("gbps_range") or [r["median_gbps"]] * 2)[i] for _, r in ok]
                         for i in (0, 1)],
            "p50_ms": [r["p50_ms"] for _, r in ok], "p99_ms": [r["p99_ms"] for _, r in ok],
            "memcpy": [(x, r["memcpy_gbps"]) for x, r in zip(mib, rows) if r.get("memcpy_gbps") is not None],
            "failed": [x for x, r in zip(mib, rows) if not r["ok"]]}


def transfer(out: Path, doc: dict) -> str:
    """`bench transfer`: GB/s against transfer size (the channel's median, memcpy on the reader beside it) and the
    read time's p50/p99; sizes that failed are red dotted lines."""
    import matplotlib.ticker

    s = transfer_series(doc["rows"])
    fig, (rate, lat) = charts.figure((11, 4), ncols=2)
    rate.errorbar(s["mib"], s["gbps"], yerr=[s["gbps_err"][0], [-e for e in s["gbps_err"][1]]], fmt="o-",
                  capsize=3, label="LMCache channel (median, min-max of the sweeps)")
    rate.plot([x for x, _ in s["memcpy"]], [y for _, y in s["memcpy"]], "s--", label="memcpy on the reader")
    for i, x in enumerate(s["failed"]):
        rate.axvline(x, color="red", alpha=0.4, linestyle=":", label="read failed" if i == 0 else None)
    drawn = s["gbps"] + [y for _, y in s["memcpy"]]
    if drawn and min(drawn) > 0:  # the channel over TCP sits orders of magnitude below memcpy
        rate.set_yscale("log")
    lat.plot(s["mib"], s["p50_ms"], "o-", label="p50")
    lat.plot(s["mib"], s["p99_ms"], "^-", label="p99")
    if doc.get("need_ms"):
        lat.axhline(doc["need_ms"], color="grey", linestyle="--", label=f"need {doc['need_ms']:g} ms")
    sizes = [r["payload_bytes"] / 2**20 for r in doc["rows"]]
    for ax, ylabel, title in ((rate, "GB/s", "Throughput by transfer size"), (lat, "read time (ms)", "Read time")):
        # Fixed limits: a log axis with nothing drawn on it (every size failed) has no range of its own.
        ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.5)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        charts.label(ax, "transfer size (MiB)", ylabel, f"{title}: {doc['source']} -> {doc['reader']}")
    return charts.save(fig, out).name
