"""`p2pctl report RUN_DIR`: summary.md with PASS/FAIL per check, per-stage and per-node tables, and PNG plots.

Everything is computed from the run folder's raw files (requests.csv, stages.json, status snapshots,
basic/result.json, lmcache-bench output), so a report can be rebuilt from the evidence alone.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from p2p_ops import files
from p2p_ops.endpoints import metrics_api
from p2p_ops.errors import BadInput
from p2p_ops.observe.records import RequestRecord, read_csv
from p2p_ops.observe.stats import fmt, percentile

T = TypeVar("T")


@dataclass
class GroupStats:
    key: str
    requests: int
    failures: int
    ttft_p50: Optional[float]
    ttft_p90: Optional[float]
    ttft_p99: Optional[float]
    req_per_s: Optional[float]
    tokens_per_s: Optional[float]
    hit_ratio: Optional[float]
    cross_node_requests: int
    tokens_from_peers: int


def stats(key: str, recs: list[RequestRecord], wall_s: Optional[float] = None) -> GroupStats:
    ok = [r for r in recs if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    if wall_s is None and recs:
        wall_s = max(r.t_end_s for r in recs) - min(r.t_start_s for r in recs)
    prompt = sum(r.prompt_tokens for r in ok)
    cross = [r for r in ok if r.cross_node]
    return GroupStats(
        key=key, requests=len(recs), failures=len(recs) - len(ok),
        ttft_p50=percentile(ttfts, 50), ttft_p90=percentile(ttfts, 90), ttft_p99=percentile(ttfts, 99),
        req_per_s=len(ok) / wall_s if wall_s else None,
        tokens_per_s=(prompt + sum(r.output_tokens for r in ok)) / wall_s if wall_s else None,
        hit_ratio=sum(r.cached_tokens for r in ok) / prompt if prompt else None,
        cross_node_requests=len(cross), tokens_from_peers=sum(r.cached_tokens for r in cross))


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def stage_checks(records: list[RequestRecord]) -> list[Check]:
    """A stage passes when nothing failed and, where prefixes crossed nodes, the other node got cache hits."""
    checks = []
    for st in dict.fromkeys(r.stage.removesuffix("-warm") for r in records):
        recs = [r for r in records if r.stage.removesuffix("-warm") == st]
        failed = [r for r in recs if not r.ok]
        by_node = ", ".join(f"{k}: {v}" for k, v in sorted(Counter(r.instance for r in failed).items()))
        checks.append(Check(f"{st}: no failed requests", not failed,
                            f"{len(failed)} of {len(recs)} failed" + (f" ({by_node})" if failed else "")))
        cross = [r for r in recs if r.ok and r.cross_node]
        if cross:
            hit = [r for r in cross if r.cached_tokens > 0]
            checks.append(Check(f"{st}: P2P hits on the node that did not warm the prefix", bool(hit),
                                f"{len(hit)} of {len(cross)} cross-node requests served from cache, "
                                f"{sum(r.cached_tokens for r in cross)} tokens"))
        served = sorted({r.instance for r in recs if r.ok})
        checks.append(Check(f"{st}: requests served on every engine", len(served) >= 2 or len(
            {r.instance for r in recs}) < 2, f"served by {', '.join(served) or 'none'}"))
    return checks


def check_table(checks: list[Check]) -> list[str]:
    """The Markdown table of checks every summary (report, proof, soak) opens with."""
    return ["| check | result | detail |", "|---|---|---|",
            *(f"| {c.name} | {'PASS' if c.ok else '**FAIL**'} | {c.detail} |" for c in checks)]


def figure_table(numbers: dict) -> list[str]:
    return ["| figure | value |", "|---|---|",
            *(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in numbers.items())]


def _table(rows: list[GroupStats], first: str) -> list[str]:
    out = [f"| {first} | requests | failures | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | req/s | tokens/s | "
           "hit ratio | cross-node req | tokens from peers |", "|" + "---|" * 11]
    for g in rows:
        ms = [fmt(v, "{:.0f}", 1000) for v in (g.ttft_p50, g.ttft_p90, g.ttft_p99)]
        out.append(f"| {g.key} | {g.requests} | {g.failures} | {' | '.join(ms)} | {fmt(g.req_per_s, '{:.2f}')} | "
                   f"{fmt(g.tokens_per_s, '{:.0f}')} | {fmt(g.hit_ratio, '{:.0f}%', 100)} | "
                   f"{g.cross_node_requests} | {g.tokens_from_peers} |")
    return out


# What a malformed evidence file raises while it is read: each becomes one line naming the file.
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, csv.Error)


def _json(run_dir: Path, name: str) -> Any:
    """A JSON file of the run folder (None when absent): a regular file inside the folder, valid JSON."""
    path = run_dir / name
    if not (path.exists() or path.is_symlink()):
        return None
    return files.read_json(path, 64 << 20, "rebuild the run or remove the file", within=run_dir)


def _shaped(path: Path, read: Callable[[], T]) -> T:
    try:
        return read()
    except _SHAPE_ERRORS as exc:
        raise BadInput(f"{path}: is not what `p2pctl test` writes ({type(exc).__name__}: {exc}); rebuild the run "
                       "or remove the file") from None


def p2p_between(before: dict, after: dict) -> dict[str, dict[str, Optional[float]]]:
    """Per instance, between two `harness.basic.snapshot`s: KV bytes the engine loaded from LMCache, prompt tokens
    its KV connector supplied, and loads its server pulled from peers."""
    def total(snap: dict, section: str, prefix: str, must: str = "") -> float:
        return sum(v for k, v in (snap.get(section) or {}).items() if k.startswith(prefix) and must in k)

    def delta(inst: str, section: str, prefix: str, must: str = "") -> Optional[float]:
        a, b = after.get(inst) or {}, before.get(inst) or {}
        if not any(k.startswith(prefix) for k in (a.get(section) or {})):
            return None  # this engine does not export it (vLLM counts tokens, not bytes)
        return total(a, section, prefix, must) - total(b, section, prefix, must)

    return {inst: {"kv_bytes_loaded": delta(inst, "engine_metrics", metrics_api.ENGINE_LOADED_BYTES),
                   "external_tokens": delta(inst, "engine_metrics", metrics_api.TOKENS_BY_SOURCE,
                                             '"external_kv_transfer"'),
                   "p2p_loads": delta(inst, "server_metrics", metrics_api.P2P_LOADS, '"p2p"') or 0.0} for inst in after}


def node_bytes(run_dir: Path) -> dict[str, dict[str, Optional[float]]]:
    """`p2p_between` the run's status_before.json and status_after.json ({} when either is missing)."""
    try:
        before, after = _json(run_dir, "status_before.json"), _json(run_dir, "status_after.json")
        if not isinstance(before, dict) or not isinstance(after, dict):
            return {}
        return p2p_between(before, after)
    except (BadInput, *_SHAPE_ERRORS):
        return {}  # optional evidence: the report stands without it


def _section(run_dir: Path, name: str, read: Callable[[Any], tuple[list[Check], list[str]]]
             ) -> tuple[list[Check], list[str]]:
    """The checks and report lines `read` makes of one JSON evidence file (none when it is absent)."""
    doc = _json(run_dir, name)
    return ([], []) if doc is None else _shaped(run_dir / name, lambda: read(doc))


def _basic(run_dir: Path) -> tuple[list[Check], list[str]]:
    return _section(run_dir, "basic/result.json", lambda b: (
        [Check(f"basic: {c['name']}", bool(c["ok"]), str(c["detail"])) for c in b["checks"]],
        ["", "## Cross-node proof", "", *figure_table(b["numbers"])]))


def _bench(run_dir: Path) -> tuple[list[Check], list[str]]:
    return _section(run_dir, "lmcache-bench/result.json", lambda b: (
        [Check("lmcache bench engine long-doc-qa: no failed requests",
               b.get("failed") == 0 and b.get("exit_code") == 0 and b.get("completed", 0) > 0,
               f"{b.get('completed', 0)} completed, {b.get('failed', '?')} failed")],
        ["", "## lmcache bench engine (long-doc-qa)", "", "```", json.dumps(b, indent=2)[:3000], "```"]))


def _pcts(figure: Optional[dict], spec: str = "{:.0f}") -> str:
    """inference-perf's median / p90 / p99 of a figure in seconds, as milliseconds."""
    return " / ".join(fmt((figure or {}).get(k), spec, 1000) for k in ("median", "p90", "p99"))


def _inference_perf(run_dir: Path) -> tuple[list[Check], list[str]]:
    """inference-perf's own figures per pass (`test stress --generator inference-perf`) beside the P2P evidence
    of the same pass."""
    def read(doc: dict) -> tuple[list[Check], list[str]]:
        stopped = (_json(run_dir, "stages.json") or {}).get("stopped")
        checks = [Check("inference-perf: every pass ran", not stopped, stopped or f"{len(doc['passes'])} passes")]
        lines = ["", f"## inference-perf {doc['version']} (scale {doc['scale']}): its figures per pass", "",
                 "| shape | pass | target | requests | failed | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | "
                 "cached / prompt tokens | P2P loads | KV MiB loaded |", "|" + "---|" * 10]
        for p in doc["passes"]:
            ip, p2p = p["inference_perf"], p["p2p"]
            lines.append(f"| {p['shape']} | {p['pass'] + 1}{' (warm)' if p['stage'].endswith('-warm') else ''} | "
                         f"{p['instance']} | {ip['requests']} | {ip['failed']} | {_pcts(ip['ttft_s'])} | "
                         f"{_pcts(ip['itl_s'], '{:.1f}')} | {p['cached_tokens']} / {p['prompt_tokens']} | "
                         f"{fmt(p2p.get('p2p_loads'), '{:g}')} | "
                         f"{fmt(p2p.get('kv_bytes_loaded'), '{:.1f}', 1 / 2**20)} |")
        lines += ["", "Sizes sent (scaled from llm-d's P2P guide; lengths in tokenizer tokens):", "",
                  "| shape | prefixes | prefix tokens | questions each | question tokens | output tokens | "
                  "concurrency |", "|" + "---|" * 7]
        lines += [f"| {name} | {d['sent']['prefixes']} | {d['sent']['prefix_tokens']} | {d['sent']['questions']} | "
                  f"{d['sent']['question_tokens']} | {d['sent']['output_tokens']} | {d['sent']['concurrency']} |"
                  for name, d in doc["shapes"].items()]
        return checks, lines

    return _section(run_dir, "inference-perf.json", read)


def _records(run_dir: Path) -> list[RequestRecord]:
    path = run_dir / "requests.csv"
    if not (path.exists() or path.is_symlink()):
        return []
    return _shaped(path, lambda: read_csv(path, within=run_dir))


def _request_sections(run_dir: Path, records: list[RequestRecord]) -> list[str]:
    meta = _json(run_dir, "stages.json") or {}
    walls = _shaped(run_dir / "stages.json",
                    lambda: {(s["name"], s["level"]): float(s["wall_s"]) for s in meta.get("stages", [])})
    main = [r for r in records if not r.stage.endswith("-warm")]
    stage_rows = [stats(f"{name} c={level}" if name == "ladder" else name,
                        [r for r in main if r.stage == name and r.level == level], wall)
                  for (name, level), wall in walls.items()]
    lines = ["", "## Per stage", "", *_table(stage_rows, "stage")]
    nodes = sorted({r.instance for r in records})
    lines += ["", "## Per node (all stages, warm-ups included)", "",
              *_table([stats(n, [r for r in records if r.instance == n]) for n in nodes], "instance")]
    nb = node_bytes(run_dir)
    if nb:
        lines += ["", "| instance | KV bytes loaded from LMCache (MiB) | prompt tokens via the KV connector | "
                  "P2P loads by its server |", "|---|---|---|---|"]
        lines += [f"| {k} | {fmt(v['kv_bytes_loaded'], '{:.2f}', 1 / 2**20)} | "
                  f"{fmt(v['external_tokens'], '{:.0f}')} | {v['p2p_loads']:g} |" for k, v in sorted(nb.items())]
    # Here, not at the top: matplotlib adds ~0.5 s to every p2pctl start.
    from p2p_ops.observe import charts

    plots = charts.make_all(run_dir, records, walls, nb)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return lines


def _interrupted(run_dir: Path) -> list[Check]:
    # harness.rundir writes this when a run is cut (down, Ctrl-C, an error): what is here is all it got to
    run = _json(run_dir, "run.json") or {}
    if not isinstance(run, dict) or run.get("state") != "interrupted":
        return []
    return [Check("run ran to its end (not interrupted)", False, str(run.get("reason", "")))]


@dataclass
class Report:
    """What `build_report` wrote and its verdict, computed from the checks (never read back from the text)."""

    summary: Path
    passed: bool
    checks: list[Check]


def build_report(run_dir: Path) -> Report:
    """Write `summary.md` into the run folder from its evidence files; a malformed or foreign file (a link
    out of the folder, a FIFO) is one line naming it (BadInput)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run folder (look under p2p-run/<fleet>/tests/)")
    (basic_checks, basic_lines), (inference_perf_checks, inference_perf_lines), (bench_checks, bench_lines) = (
        _basic(run_dir), _inference_perf(run_dir), _bench(run_dir))
    records = _records(run_dir)
    checks = basic_checks + (stage_checks(records) if records else []) + inference_perf_checks + bench_checks
    checks += _interrupted(run_dir)
    if not checks:
        raise BadInput(f"{run_dir}: nothing to report (no requests.csv, basic/result.json or lmcache-bench/)")
    passed = all(c.ok for c in checks)
    lines = [f"# Fleet test report — {run_dir.name}", "", f"**Overall: {'PASS' if passed else 'FAIL'}**", "",
             *check_table(checks)]
    lines += (basic_lines + inference_perf_lines + (_request_sections(run_dir, records) if records else [])
              + _explained(run_dir) + bench_lines)
    evidence = ("requests.csv", "prompts.jsonl", "stages.json", "status_before.json", "status_after.json",
                "inference-perf.json", "inference-perf/", "explain.json", "basic/result.json", "basic/explain.txt",
                "env/")
    lines += ["", "## Evidence", ""] + [f"- `{name}`" for name in evidence if (run_dir / name).exists()]
    return Report(files.write_text(run_dir / "summary.md", "\n".join(lines) + "\n"), passed, checks)


def _explained(run_dir: Path) -> list[str]:
    """`p2pctl explain`'s verdicts for requests that were not served from cache (the harness saved them)."""
    basic = _json(run_dir, "basic/result.json")
    saved = _json(run_dir, "explain.json")

    def read() -> list[tuple[str, dict]]:
        found = [("basic b", basic["explain"])] if isinstance(basic, dict) and (basic.get("explain") or {}).get(
            "strip") else []
        return found + [(f"request {e.get('request')} ({e.get('stage', '')})", e) for e in saved or []]

    found = _shaped(run_dir / "explain.json", read)
    if not found:
        return []
    lines = ["", "## Why requests missed the cache (p2pctl explain)", "", "| request | instance | chunks | verdict |",
             "|---|---|---|---|"]
    return lines + [f"| {name} | {e.get('instance', '')} | `{e.get('strip', '')}` | "
                    f"{str(e.get('verdict') or e.get('error', '')).replace('|', '/')} |" for name, e in found]
