"""Baselines: a fleet's figures kept under a name, and a later run's figures set against them.

`figures_of(run)` reads a run folder's own files (basic's proof TTFTs, the matrix's pull times, stress TTFT
p50/p99 per stage, transfer GB/s per size, soak slopes); every figure keeps its samples, so repeats pooled in one
baseline widen its spread. A figure regressed when its new value lies beyond the baseline's spread in the worse
direction AND moved more than TOLERANCE (relative) AND more than its floor (absolute). A figure of one sample per
run (a proof TTFT, a matrix pull) has no spread worth the name: on the shared 2-core box one pair's pull measured
47-83 ms over five unchanged runs, another's 63-732 ms over three; with fewer than THIN_SAMPLES its median must
move by more than THIN_TOLERANCE, and reruns given together (`compare NAME RUN RUN RUN`) are judged on their median.

What a comparison stands on is checked, never assumed: the same fleet (else one line, exit 2); the settings (the
env.sh files the run folder copied: profile, chunk size, L1, timings, transfer engine), where every difference is
named as the first finding and the figures are still compared, since an accidental change is the regression an
operator asks about; and, per figure, the same way of measuring it (prompt length, ladder, generator options),
else that figure is "measured differently". Runs chosen by default are the newest finished ones: a newer run that
did not finish, or a fleet that is not ready now, is the verdict (`later_unfinished`), never "OK".
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts.envfile import read_env_sh
from p2p_ops.facts.secret_names import is_secret_name
from p2p_ops.observe.records import read_csv
from p2p_ops.observe.stats import percentile
from p2p_ops.spec.layout import BASELINES, RunLayout

TOLERANCE = 0.25
THIN_SAMPLES = 4
THIN_TOLERANCE = 0.5   # a figure of fewer than THIN_SAMPLES: single pulls here varied 1.3-3x between unchanged runs
MS_FLOOR = 5.0     # ms: below a scheduler tick or two of a busy box, a TTFT or pull time has not moved
SECRET_SET = "set (not kept)"   # a secret setting's value, as settings_of keeps it
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Stress options that bound or label a run without changing what a figure measures.
_NOT_HOW = ("seed", "tag", "max_seconds", "max_requests", "stages", "venv")


@dataclass
class Figure:
    name: str
    unit: str
    better: str                    # "lower" or "higher"
    samples: list[float]
    q: float = 50                  # the figure is this percentile of its samples
    how: dict = field(default_factory=dict)   # how it was measured: a different one is not comparable
    floor: float = 0.0             # the smallest absolute change that counts
    failed: str = ""               # why the run could not measure it (a pair that did not pull): a regression

    @property
    def value(self) -> float:
        return percentile(self.samples, self.q)

    @property
    def spread(self) -> tuple[float, float]:
        """min..max of a few repeats; of many samples the middle half (p50) or p90..max (a tail percentile)."""
        s = self.samples
        if len(s) < THIN_SAMPLES:
            return min(s), max(s)
        return (percentile(s, 25), percentile(s, 75)) if self.q <= 50 else (percentile(s, 90), max(s))


def _ms(values) -> list[float]:
    return [v * 1000 for v in values if v is not None]


def _basic(doc: dict) -> list[Figure]:
    how = {"test": "basic", "chunks": doc.get("chunks"), "chunk_size": doc.get("chunk_size")}
    n = doc.get("numbers") or {}
    failed = "" if doc.get("passed") else (doc.get("likely_cause") or "the proof failed")[:200]
    return [Figure(f"basic {label}", "ms", "lower", _ms([n.get(key)]), how=how, floor=MS_FLOOR,
                   failed=failed if key == "ttft_peer_b_s" or n.get(key) is None else "")
            for key, label in (("ttft_cold_a_s", "TTFT cold on A"), ("ttft_peer_b_s", "TTFT from peer on B"),
                               ("ttft_control_b_s", "TTFT control on B"))]


def _matrix(doc: dict) -> list[Figure]:
    how = {"test": "matrix", "chunks": doc.get("chunks"), "chunk_size": doc.get("chunk_size")}
    out = []
    for p in doc.get("pairs", []):
        ok = bool(p.get("ok")) and p.get("pull_ms") is not None
        why = p.get("cause") or p.get("error") or "skipped"
        out.append(Figure(f"matrix pull {p['source']} -> {p['target']}", "ms", "lower", [p["pull_ms"]] if ok else [],
                          how={**how, "measure": p.get("pull_measure", "")}, floor=MS_FLOOR,
                          failed="" if ok else f"the pair failed: {why}"[:200]))
    return out


def _stress(run: Path, doc: dict) -> list[Figure]:
    how = {"test": "stress", "generator": doc.get("generator", "ours"),
           **{k: v for k, v in (doc.get("options") or {}).items() if k not in _NOT_HOW}}
    stages: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    for r in read_csv(run / "requests.csv", within=run):
        if not r.stage.endswith("-warm"):
            key = f"{r.stage}@{r.level}"
            stages.setdefault(key, []).extend(_ms([r.ttft_s]) if r.ok else [])
            failures[key] = failures.get(key, 0) + (not r.ok)
    return [Figure(f"stress {stage} TTFT p{q}", "ms", "lower", ttfts, q=q, how=how, floor=MS_FLOOR,
                   failed=f"{failures[stage]} requests failed" if failures[stage] or not ttfts else "")
            for stage, ttfts in stages.items() for q in (50, 99)]


def _transfer(doc: dict) -> list[Figure]:
    """GB/s per size, from each timed read (times_ms), so the spread is that of the reads."""
    out = []
    for r in doc.get("rows", []):
        reads = [r["payload_bytes"] / (t / 1000) / 1e9 for t in r.get("times_ms") or [] if t and t > 0]
        ok = bool(r.get("ok")) and bool(reads)
        how = {"test": "transfer", "pattern": doc.get("pattern"), "source": doc.get("source"),
               "reader": doc.get("reader"), "object_size": r.get("object_size")}
        out.append(Figure(f"transfer {r.get('engine', 'nixl')} {r['payload_bytes'] / 2**20:g} MiB", "GB/s",
                          "higher", reads if ok else [], how=how,
                          failed="" if ok else f"the size failed: {r.get('error') or 'no timed read'}"[:200]))
    return out


def _soak(doc: dict) -> list[Figure]:
    """Leak slopes; a change smaller than the slope the soak itself calls a leak (its min_per_hour) is no news."""
    opts = doc.get("options") or {}
    how = {"test": "soak", **{k: opts.get(k) for k in ("duration_s", "warmup_s", "concurrency", "via_router")}}
    out = []
    for t in doc.get("trends", []):
        if t.get("slope_per_h") is None or t.get("too_short"):
            continue
        kind = "rss" if t["metric"].endswith("_mib") else "stale" if t["metric"].startswith("stale") else t["metric"]
        out.append(Figure(f"soak {t['unit']} {t['metric']} slope", "/h", "lower", [t["slope_per_h"]], how=how,
                          floor=float((opts.get(kind) or {}).get("min_per_hour", 0))))
    return out


def family(run: Path) -> Optional[str]:
    """Which figures a run folder holds (an `all` run's are stress's; its proof is in basic/)."""
    for name, marker in (("stress", "stages.json"), ("soak", "soak.json"), ("transfer", "transfer.json")):
        if (run / marker).is_file():
            return name
    doc = _json(run / "result.json") if (run / "result.json").is_file() else {}
    return "matrix" if "pairs" in doc else "basic" if "numbers" in doc else None


def _state(run: Path) -> dict:
    """The run's run.json, as harness.rundir writes it ({} for a run older than it, or a file not its own)."""
    try:
        return _json(run / "run.json")
    except BadInput:
        return {}


def unfinished(run: Path) -> str:
    """Why the run did not finish (its state and reason), "" when it did."""
    state = _state(run)
    return "" if state.get("state", "complete") == "complete" else f"{state['state']} {state.get('reason', '')}".strip()


def kind_of(run: Path) -> Optional[str]:
    """What ran there: run.json's kind (stress, all, longdoc, with the tag), else what its figures are of; None
    for a run cut short or still running, or one without figures."""
    found = family(run)
    return (_state(run).get("kind") or found) if found and not unfinished(run) else None


def latest_runs(tests: Path, kinds=None, after: str = "") -> list[Path]:
    """The newest finished run folder of each kind (of `kinds` when given), named after `after` (folder names start
    with their UTC time, so they sort)."""
    newest: dict[str, Path] = {}
    for folder in sorted(tests.iterdir()) if tests.is_dir() else []:
        # A link there names a folder elsewhere, of another fleet maybe: never this fleet's run.
        kind = kind_of(folder) if not folder.is_symlink() and folder.is_dir() and folder.name > after else None
        if kind and (kinds is None or kind in kinds):
            newest[kind] = folder
    return list(newest.values())


def figures_of(run: Path) -> list[Figure]:
    """The run's figures; a file that is not what p2pctl writes is one BadInput line naming the run."""
    try:
        return _figures_of(run)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadInput(f"{run}: its files are not what p2pctl writes ({type(exc).__name__}: {str(exc)[:120]}); "
                       "give a run folder a `p2pctl test` or `bench transfer` run wrote") from None


def _figures_of(run: Path) -> list[Figure]:
    kind = family(run)
    if kind is None:
        raise BadInput(f"{run}: no figures there (no result.json, stages.json, soak.json or transfer.json); "
                       "give a folder a `p2pctl test` or `bench transfer` run wrote")
    if kind == "stress":
        proof = _basic(_json(run / "basic" / "result.json")) if (run / "basic" / "result.json").is_file() else []
        return proof + _stress(run, _json(run / "stages.json"))
    if kind in ("soak", "transfer"):
        return {"soak": _soak, "transfer": _transfer}[kind](_json(run / f"{kind}.json"))
    return {"matrix": _matrix, "basic": _basic}[kind](_json(run / "result.json"))


def _json(path: Path, follow: bool = True) -> dict:
    doc = files.read_json(path, 64 << 20, follow=follow)
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: not a JSON object; not a file p2pctl wrote")
    return doc


def settings_of(run: Path) -> dict[str, str]:
    """The settings the run was made with, from its copies of the fleet's env.sh (`file:VAR` -> value), paths left
    out (a checkout moved elsewhere measures the same). A secret is SECRET_SET, not even a digest (a short password
    is guessable from one): a key shapes no figure, so runs differing only in its value compare."""
    out = {}
    for env in sorted((run / "env").glob("*.env.sh")):
        for k, v in read_env_sh(files.read_text(env, 1 << 20, within=run)).env.items():
            if not k.endswith("_DIR"):
                out[f"{env.name.removesuffix('.env.sh')}:{k}"] = v
    return _kept(out)


def _kept(settings: dict[str, str]) -> dict[str, str]:
    """Also applied to a loaded baseline: an older p2pctl kept a digest, or in clear a secret its classifier missed."""
    return {k: SECRET_SET if is_secret_name(k.partition(":")[2] or k) else v for k, v in settings.items()}


def fleet_of(run: Path) -> str:
    """The fleet a run was made on: its env.sh says; a folder without them, p2p-run/<fleet>/tests/<run>."""
    return next((v for k, v in settings_of(run).items() if k.endswith(":P2P_FLEET_NAME")), run.parent.parent.name)


def installed_versions(ctx) -> dict:
    """LMCache, vLLM, NIXL, torch and UCX as the first node's interpreter has them (None: not installed or not
    read: a version is recorded beside the figures, never a reason to refuse a comparison)."""
    from p2p_ops.facts.python_env import python_env_fact, version_of
    from p2p_ops.facts.sections import read_fact
    from p2p_ops.facts.ucx_info import UCX_INFO_VERSION
    from p2p_ops.lifecycle.preflight.probe import node_python

    node = ctx.fleet.nodes[0]
    try:
        py = read_fact(ctx.conn(node), python_env_fact(node_python(node)), timeout=60)
        ucx = read_fact(ctx.conn(node), UCX_INFO_VERSION, timeout=30)
    except Exception as exc:  # noqa: BLE001 - versions are context, not the comparison
        return {"error": str(exc)[:200]}
    return {**{n: version_of(py.packages, n) for n in ("lmcache", "vllm", "nixl", "torch")},
            "ucx": ucx.version or None}


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise BadInput(f"baseline name {name!r}: use letters, digits, '.', '_' or '-' (64 at most), e.g. before")
    return name


def path_of(layout: RunLayout, name: str) -> Path:
    return layout.root / BASELINES / f"{check_name(name)}.json"


def pooled(runs_: list[Path]) -> list[Figure]:
    """The figures of several runs; a figure measured in more than one (repeats) pools its samples."""
    out: dict[str, Figure] = {}
    for run in runs_:
        for f in figures_of(run):
            if f.name in out and out[f.name].how != f.how:
                raise BadInput(f"{f.name}: measured differently in {run.name} than in an earlier run given "
                               f"({_first_diff(out[f.name].how, f.how)}); give runs made the same way")
            kept = out.setdefault(f.name, Figure(**{**asdict(f), "samples": []}))
            kept.samples.extend(f.samples)
            kept.failed = kept.failed or (f.failed and f"{f.failed} (in {run.name})")
    return list(out.values())


def build(name: str, fleet: str, runs_: list[Path], versions: dict) -> dict:
    """The baseline document: its figures, the runs they come from, their settings and the versions installed."""
    settings = settings_of(runs_[0])
    for run in runs_:
        if fleet_of(run) != fleet:
            raise BadInput(f"{run}: a run of fleet {fleet_of(run)!r}, not {fleet!r}; give runs of this fleet")
        if settings != (theirs := settings_of(run)):
            raise BadInput(f"{run.name} and {runs_[0].name} ran with different settings "
                           f"({_first_diff(settings, theirs)}); a baseline holds runs made with the same settings")
    figures = pooled(runs_)
    if bad := next((f for f in figures if f.failed), None):
        raise BadInput(f"{bad.name}: {bad.failed}; a baseline holds what passing runs measured: fix it (or leave "
                       "that run out with --run) and save again")
    return {"name": name, "fleet": fleet, "saved": time.time(), "runs": [str(r) for r in runs_],
            "kinds": sorted({kind_of(r) or "" for r in runs_}), "versions": versions, "settings": settings,
            "figures": [asdict(f) for f in figures]}


def load(layout: RunLayout, name: str) -> dict:
    path = path_of(layout, name)
    if not path.is_file():
        have = ", ".join(saved(layout)) or "none yet"
        raise BadInput(f"no baseline {name!r} for this fleet (saved: {have}); save one with `p2pctl baseline save "
                       f"{name}`")
    doc = _json(path, follow=False)
    try:
        ok = all(k in doc for k in ("fleet", "runs", "kinds", "versions", "settings")) and all(
            _sound(Figure(**f)) for f in doc["figures"])
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise BadInput(f"{path}: not a baseline p2pctl wrote (a field is missing or malformed); save it again "
                       f"with `p2pctl baseline save {name}`")
    return doc


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _sound(f: Figure) -> bool:
    """What p2pctl writes: finite samples (a NaN or an Infinity turns any regression into "within"), a known
    direction, a percentile and a floor that are numbers."""
    return (bool(f.samples) and all(map(_finite, f.samples)) and f.better in ("lower", "higher")
            and _finite(f.q) and 0 <= f.q <= 100 and _finite(f.floor) and f.floor >= 0)


def saved(layout: RunLayout) -> list[str]:
    """The fleet's baselines, oldest first."""
    folder = layout.root / BASELINES
    found = [p for p in folder.glob("*.json") if not p.is_symlink()] if folder.is_dir() else []
    found.sort(key=lambda p: p.stat().st_mtime)
    return [p.stem for p in found]


def _first_diff(a: dict, b: dict) -> str:
    key = next(k for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k))
    return f"{key} is {a.get(key, '(unset)')!r} there, {b.get(key, '(unset)')!r} here"


def setting_changes(baseline: dict, runs: list[Path]) -> list[str]:
    """Each setting a run was made with that differs from the baseline's, `file:VAR: old -> new (run NAME)`: the
    first finding of a comparison, since an accidental settings change is the regression an operator asks about.
    A run of another fleet is refused (one line)."""
    kept, changes = _kept(baseline["settings"]), []
    for run in runs:
        if fleet_of(run) != baseline["fleet"]:
            raise BadInput(f"run {run.name} is of fleet {fleet_of(run)!r}, baseline {baseline['name']!r} of "
                           f"{baseline['fleet']!r}; compare runs of the same fleet")
        theirs = settings_of(run)
        changes += [f"{k}: {kept.get(k, '(unset)')} -> {theirs.get(k, '(unset)')} (run {run.name})"
                    for k in sorted(set(kept) | set(theirs)) if kept.get(k) != theirs.get(k)]
    return changes


def compare(baseline: dict, runs: list[Path]) -> list[dict]:
    """One row per figure of the baseline, the runs' repeats pooled: REGRESSED, FAILED (the run could not measure
    it), improved, within, not measured (the run did not try) or measured differently (another prompt length,
    ladder, ...: not comparable). Runs made with other settings are compared all the same (`setting_changes`
    names what differs): what the change did to each figure is the point."""
    mine = {f.name: f for f in pooled(runs)}
    if not set(mine) & {f["name"] for f in baseline["figures"]}:
        raise BadInput(f"{', '.join(r.name for r in runs)}: none of baseline {baseline['name']!r}'s figures measured "
                       f"there (it holds {'/'.join(sorted(baseline['kinds']))} runs); give a run of the same kind")
    rows = _rows(baseline, mine)
    if not any(r["now"] is not None or r["verdict"] == "FAILED" for r in rows):
        why = next(f"{r['figure']}: {r['why']}" for r in rows if r["verdict"] == "measured differently")
        raise BadInput(f"no figure of baseline {baseline['name']!r} was measured the same way there ({why})")
    return rows


def _rows(baseline: dict, mine: dict[str, Figure]) -> list[dict]:
    rows = []
    for doc in baseline["figures"]:
        old, f = Figure(**doc), mine.get(doc["name"])
        row = {"figure": old.name, "unit": old.unit, "better": old.better, "baseline": old.value,
               "spread": list(old.spread), "now": None, "change": None, "verdict": "not measured",
               "samples": 0 if f is None else len(f.samples)}
        if f is not None and f.failed:
            row.update(verdict="FAILED", why=f.failed)
        elif f is not None and f.how != old.how:
            row.update(verdict="measured differently", why=f"{_first_diff(old.how, f.how)}; rerun it the "
                       "baseline's way to compare it")
        elif f is not None:
            row.update(now=f.value, change=(f.value - old.value) / old.value if old.value else None,
                       verdict=movement(old, f.value))
        rows.append(row)
    return rows


def later_unfinished(tests: Path, after: str) -> list[str]:
    """Run folders newer than `after` that did not finish (cut short, interrupted): `NAME: state reason`."""
    folders = sorted(tests.iterdir()) if tests.is_dir() else []
    return [f"{f.name}: {why}" for f in folders if f.is_dir() and f.name > after and (why := unfinished(f))]


def movement(old: Figure, now: float) -> str:
    """Beyond the spread and the tolerance. Fewer than THIN_SAMPLES make no spread to trust (one slow repeat of
    three once hid an 8x slower pull behind its 732 ms): those move on the median alone, by more than THIN_TOLERANCE."""
    thin = len(old.samples) < THIN_SAMPLES
    lo, hi = (old.value, old.value) if thin else old.spread
    tolerance = THIN_TOLERANCE if thin else TOLERANCE
    worse, better = (now > hi, now < lo) if old.better == "lower" else (now < lo, now > hi)
    if abs(now - old.value) <= max(tolerance * abs(old.value), old.floor):
        return "within"
    return "REGRESSED" if worse else "improved" if better else "within"
