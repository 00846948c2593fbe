"""Explain a miss (`p2pctl explain`): for one prompt, which chunk each node holds, which peer would serve it, and
why a node would miss it.

Modules, one concept each: `prompt` (what to explain: text, a file, chat messages, a test run's request),
`gather` (the reading: processes, /status, metrics, logs, the engines' /tokenize, LMCache's hasher run on
each node through `facts.chunk_keys`, the coordinator's key directory), `near` (a held chunk that nearly
matches the first one), `answer` (the answer per target: each chunk as the one judge's `judge.chunk` decides
it, the summary, the notes, which key inputs differ), `render` (tables and the per-chunk strip), `model` (the
types).

Explaining never changes the fleet: no prefetch, no pull, no lock (see `gather.NOT_USED`). Exit codes: 0 every
full chunk is served on every target, 1 a target would recompute some, 2 could not explain.
"""

from __future__ import annotations

from typing import Callable, Optional

from p2p_ops.diagnose.explain.gather import NOT_USED, gather
from p2p_ops.diagnose.explain.model import Explanation
from p2p_ops.diagnose.explain.prompt import PromptSpec, from_file, from_messages, from_run, from_text
from p2p_ops.diagnose.explain.render import render_text, strip_line
from p2p_ops.diagnose.explain.answer import explain
from p2p_ops.diagnose.judge import Judgement
from p2p_ops.diagnose.judge.views import ExplainFacts
from p2p_ops.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK
from p2p_ops.lifecycle.context import FleetContext

__all__ = ["ExplainFacts", "Explanation", "PromptSpec", "exit_code", "explain", "from_file", "from_messages",
           "from_run", "from_text", "render_text", "run", "run_saved", "sources", "strip_line", "time_line"]


def sources(facts: ExplainFacts) -> list[str]:
    """Where the evidence came from, and what was left out and why."""
    by: dict[str, list[str]] = {}
    for v in facts.instances:
        if v.keys_from:
            by.setdefault(v.keys_from, []).append(v.instance)
    out = ["chunk keys: LMCache's TokenHasher + resolve_object_keys with each server's chunk size, hash algorithm, "
           "model, world size and PYTHONHASHSEED: " + "; ".join(f"{', '.join(i)} by {k}" for k, i in by.items())
           + " (the coordinator's only where a server hashes exactly as it does: same chunk size, blake3, same "
           "lmcache install)", "tokens: each engine's POST /tokenize"]
    if facts.directory_error:
        out.append(f"holdings: UNKNOWN, the coordinator's key directory did not answer ({facts.directory_error})")
    else:
        silent = sorted(i for i, ok in facts.reporting.items() if not ok and facts.view(i).server_state == "running")
        out.append("holdings: the coordinator's key directory (POST /directory/lookup), fed by the servers' "
                   "cache events (--coordinator-event-reporting)"
                   + (f"; {', '.join(silent)} reported no L1 key yet (empty, or started without event "
                      "reporting: its holdings are invisible)" if silent else ""))
    for inst, said in facts.listing.items():
        out.append(f"GET /cache/objects?tier=l1 on {inst}: {said}")
    for inst, why in facts.events_error.items():
        out.append(f"KV events of {inst}'s engine (its replay socket): UNKNOWN, {why}")
    out.append(NOT_USED)
    return out


def time_line(ex: Explanation) -> str:
    """Where explain's time went (stderr and --json only: it differs from run to run)."""
    return (f"explain took {sum(ex.timings.values()):.1f} s: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in ex.timings.items()))


def run(ctx: FleetContext, prompt: PromptSpec, targets: Optional[list[str]] = None, salt: str = "",
        progress: Callable[[str], None] = lambda _: None,
        judged: Optional[Callable[[], Judgement]] = None) -> Explanation:
    facts = gather(ctx, prompt, targets, salt, progress, judged)
    out = explain(facts)
    out.sources, out.timings = sources(facts), facts.timings
    return out


def run_saved(ctx: FleetContext, folder: str,
              judged: Optional[Callable[[], Judgement]] = None) -> tuple[PromptSpec, Explanation]:
    """A saved run's request that missed (`from_run`), explained on the instance the run sent it to."""
    spec = from_run(folder, None)
    target = spec.recorded.get("instance")
    return spec, run(ctx, spec, [target] if target else None, judged=judged)


def exit_code(ex: Explanation) -> int:
    if not ex.nodes or all(not n.chunks and not n.causes and n.verdict.startswith("cannot") for n in ex.nodes):
        return EXIT_BAD_INPUT
    return EXIT_CHECK_FAILED if ex.misses or any(n.causes for n in ex.nodes) else EXIT_OK
