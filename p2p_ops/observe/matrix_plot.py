"""The pair matrix of `p2pctl test matrix` as people read it: an N x N Markdown table and a heatmap PNG.

Rows are the instance that computed the prefix (source), columns the one that pulled it (target). Both take the
matrix's JSON document (harness.matrix.MatrixResult.to_dict()), so a saved result.json redraws the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from p2p_ops.observe import charts


def _pairs(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(p["source"], p["target"]): p for p in doc["pairs"]}


def cell_text(p: Optional[dict[str, Any]]) -> str:
    """One cell: verdict, cached/needed tokens, pull ms and MB/s."""
    if p is None:
        return "—"
    if p["skipped"]:
        return "skipped"
    head = "PASS" if p["ok"] else "FAIL"
    pull = f", {p['pull_ms']:.0f} ms" if p.get("pull_ms") else ""
    rate = f", {p['mbps']:.0f} MB/s" if p.get("mbps") else ""
    return f"{head} {p['cached_tokens']}/{p['need']}{pull}{rate}"


def markdown(doc: dict[str, Any]) -> str:
    names, pairs, c = doc["instances"], _pairs(doc), doc["counts"]
    verdict = "PASS" if doc["passed"] else "FAIL"
    lines = [f"# Pair matrix: {verdict} ({c['passed']}/{c['pairs']} pairs"
             + (f", {c['skipped']} skipped" if c["skipped"] else "") + ")", "",
             f"Rows computed a fresh prefix of {doc['chunks']} chunks of {doc['chunk_size']} tokens"
             + (f" (KV profile {doc['profile']})" if doc.get("profile") else "")
             + "; columns pulled it. Cell: cached / needed tokens, pull time (the puller's LMCache lookup + "
             f"retrieve), KV MB/s. {doc['seconds']:.0f} s of a {doc['max_seconds']:.0f} s bound.", "",
             "| source \\ target | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s in names:
        row = [cell_text(pairs.get((s, t))) if s != t else "·" for t in names]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    causes = [p for p in doc["pairs"] if not p["ok"] and not p["skipped"]]
    if causes:
        lines += ["", "| failing pair | likely cause |", "|---|---|"]
        lines += [f"| {p['source']} -> {p['target']} | {p['cause'] or p['error']} |" for p in causes]
    lines += [""] + [f"- {n}" for n in doc.get("notes") or []]
    return "\n".join(lines).rstrip() + "\n"


def heatmap(path: Path, doc: dict[str, Any]) -> None:
    """Green/red cells (grey: skipped, white: the diagonal), annotated with MB/s or FAIL."""
    from matplotlib.colors import ListedColormap

    names, pairs = doc["instances"], _pairs(doc)
    n = len(names)
    grid = [[_look(pairs.get((s, t)))[0] if s != t else 0 for t in names] for s in names]
    fig, ax = charts.figure((1.2 + 0.9 * n, 1.0 + 0.8 * n))
    ax.imshow(grid, cmap=ListedColormap(["#ffffff", "#4caf50", "#e53935", "#bdbdbd"]), vmin=0, vmax=3)
    for i, s in enumerate(names):
        for j, t in enumerate(names):
            if s != t:
                ax.text(j, i, _look(pairs.get((s, t)))[1], ha="center", va="center", fontsize=7)
    ax.set_xticks(range(n), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_xlabel("pulled by (target)")
    ax.set_ylabel("computed on (source)")
    c = doc["counts"]
    ax.set_title(f"P2P pair matrix: {c['passed']}/{c['pairs']} pass" + (f" ({doc['profile']})" if doc.get("profile")
                                                                      else ""), fontsize=9)
    charts.save(fig, path)


def _look(p: Optional[dict[str, Any]]) -> tuple[int, str]:
    """A cell's colour index and its text."""
    if p is None or p["skipped"]:
        return 3, "skip"
    if not p["ok"]:
        return 2, "FAIL"
    return 1, f"{p['mbps']:.0f}\nMB/s" if p.get("mbps") else "ok"
