"""`explain` as text: one table per node (chunk, tokens, key, held here, held by, what a request would do), the
per-chunk strip that shows at a glance where the prefix breaks, the reasons with their evidence and the catalogue's
fix, and where the evidence came from.

    node-b-0 (node-b)  [PPPPPPPP.]  8/8 full chunks served (8 pulled from node-a)
"""

from __future__ import annotations

from p2p_ops.diagnose.explain.model import STRIP, Explanation, NodeExplanation

LEGEND = "strip: " + ", ".join(f"{ch} {what}" for what, ch in (
    ("local hit", STRIP["hit"]), ("pull from a peer", STRIP["pull"]), ("recompute", STRIP["recompute"]),
    ("partial chunk, never cached", STRIP["partial"])))
# One row per chunk up to this many; longer prompts show the first and last rows (the strip shows all).
MAX_ROWS = 40


def strip_line(n: NodeExplanation) -> str:
    return f"{n.instance} ({n.node})  [{n.strip}]  {n.verdict}"


def _rows(n: NodeExplanation) -> list[tuple[str, ...]]:
    rows = [("chunk", "tokens", "key", "here", "held by", "a request would")]
    chunks = n.chunks if len(n.chunks) <= MAX_ROWS else n.chunks[:MAX_ROWS // 2] + n.chunks[-MAX_ROWS // 2:]
    last = -1
    for c in chunks:
        if c.index != last + 1:
            rows.append(("...", "", "", "", "", f"({c.index - last - 1} chunks not shown)"))
        last = c.index
        rows.append((str(c.index), f"{c.start}-{c.end}", c.key[:12] or "-", c.here or "-",
                     ", ".join(c.holders) or "-", c.describe()))
    return rows


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def node_lines(n: NodeExplanation) -> list[str]:
    lines = [strip_line(n)]
    if n.chunks:
        lines += _table(_rows(n))
    seen = set()
    for c in n.chunks:
        if c.reason and c.reason not in seen and c.reason != "partial":
            seen.add(c.reason)
            lines.append(f"  why {c.reason} (from chunk {c.index}): {c.detail}")
            # A broken prefix takes the first miss's fix.
            if c.cause and c.reason != "prefix_broken":
                lines.append(f"    {'fix' if c.cause.confirmed else 'next'}: {c.cause.fix} (scope: {c.cause.scope})")
    lines += [f"  note: {note}" for note in n.notes]
    return lines


def render_text(ex: Explanation, strip_only: bool = False) -> list[str]:
    lines = [f"explain: {ex.prompt} on fleet {ex.fleet} (runtime {ex.runtime})"]
    for n in ex.nodes:
        lines += [strip_line(n)] if strip_only else ["", *node_lines(n)]
    if ex.differences:
        lines += ["", "key inputs that differ across servers:"] + [f"  {d}" for d in ex.differences]
    if not strip_only:
        lines += ["", "sources:"] + [f"  {s}" for s in ex.sources]
    lines.append(LEGEND)
    return lines
