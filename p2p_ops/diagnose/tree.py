"""The symptom decision tree (`p2pctl diagnose SYMPTOM`): data in `tree.yaml`, checks and rendering here.

`load_tree()` reads the data; `find_symptom()` maps what an operator types ("peers not registered", "l1_oom",
"NIXL_ERR_BACKEND") to a symptom; `diagnose()` walks its steps, runs each step's automated checks against an
`Evidence` (the fleet's doctor facts, logs, metrics and /status, gathered once and lazily) and returns what each
step found; `render_markdown()` writes the skill's `references/decision-tree.md`.

Add a check: an entry in `CHECKS` (or a `log:` signature in tree.yaml), then name it in a step.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

from p2p_ops import probes
from p2p_ops.errors import BadInput
from p2p_ops.redact import redact_text
from p2p_ops.resources import tree_text

REFERENCE_MD = Path(__file__).resolve().parents[2] / ".claude/skills/lmcache-p2p-diagnose/references/decision-tree.md"
LOG_MATCH_LIMIT = 5000
STATUSES = ("problem", "info", "ok", "unknown")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---- the data ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str
    logs: tuple[str, ...]
    meaning: str

    @property
    def regex(self) -> re.Pattern:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class Step:
    id: str
    ask: str
    cause: str
    fix: str
    checks: tuple[str, ...] = ()
    manual: tuple[str, ...] = ()


@dataclass(frozen=True)
class Symptom:
    id: str
    title: str
    aliases: tuple[str, ...]
    looks_like: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Tree:
    symptoms: tuple[Symptom, ...]
    signatures: dict[str, Signature]


def load_tree(path: Path | None = None) -> Tree:
    """The shipped tree (package data, so an installed wheel has it), or the YAML file at `path`."""
    data = yaml.safe_load(Path(path).read_text() if path else tree_text())
    sigs = {k: Signature(k, v["pattern"], tuple(v["logs"]), v["meaning"]) for k, v in data["signatures"].items()}
    symptoms = tuple(Symptom(s["id"], s["title"], tuple(s.get("aliases", ())), s["looks_like"], tuple(
        Step(st["id"], st["ask"], st["cause"], st["fix"], tuple(st.get("checks", ())), tuple(st.get("manual", ())))
        for st in s["steps"])) for s in data["symptoms"])
    return Tree(symptoms, sigs)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def find_symptom(tree: Tree, text: str) -> Symptom:
    """Exact id/title/alias first, then the symptom sharing the most words with the text."""
    want = _norm(text)
    for s in tree.symptoms:
        if want in {_norm(s.id), _norm(s.title), *map(_norm, s.aliases)}:
            return s
    words = set(want.split())
    scored = []
    for s in tree.symptoms:
        names = [s.id, s.title, *s.aliases]
        score = max(len(words & set(_norm(n).split())) / max(1, len(set(_norm(n).split()))) for n in names)
        scored.append((score, s))
    score, best = max(scored, key=lambda x: x[0])
    if score >= 0.5:
        return best
    raise BadInput(f"no symptom matches {text!r}; known: " + "; ".join(f"'{s.title}'" for s in tree.symptoms)
                   + " (`p2pctl diagnose --list`)")


# ---- what checks read -------------------------------------------------------------------------------------

@dataclass
class Observation:
    check: str
    status: str               # problem | info | ok | unknown
    subject: str
    detail: str
    fix: str = ""


class Evidence:
    """Everything the checks read, gathered at most once per run. `ctx` may be None (only --log files)."""

    def __init__(self, ctx, tree: Tree, extra_logs: tuple[Path, ...] = (), reach: bool = True):
        self.ctx, self.tree, self.extra_logs, self.reach = ctx, tree, tuple(extra_logs), reach
        self._doctor = None
        self._logs: Optional[list[tuple[str, str, list[str]]]] = None
        self._metrics: dict[str, list] = {}

    def doctor(self):
        if self._doctor is None and self.ctx is not None:
            from p2p_ops.diagnose.doctor import run

            self._doctor = run(self.ctx, reach=self.reach)
        return self._doctor

    @property
    def facts(self):
        got = self.doctor()
        return got[0] if got else None

    def running_servers(self) -> list[tuple]:
        """(node, instance, server url) of servers whose process runs."""
        if self.facts is None:
            return []
        running = {i.instance for i in self.facts.instances if i.running}
        return [(n, i, self.ctx.server_url(n, i)) for n, i in self.ctx.fleet.instances() if i.id in running]

    def metrics(self, url: str) -> list:
        if url not in self._metrics:
            self._metrics[url] = probes.scrape(url)
        return self._metrics[url]

    def logs(self) -> list[tuple[str, str, list[str]]]:
        """(label, role, matching lines) per log: one grep per log for the union of all signatures."""
        if self._logs is None:
            self._logs = []
            patterns = [s.pattern for s in self.tree.signatures.values()]
            grep = "grep -a -E " + " ".join(f"-e {shlex.quote(p)}" for p in patterns)
            for label, role, conn, path in self._log_files():
                res = conn.run(f"{grep} {shlex.quote(path)} 2>/dev/null | tail -n {LOG_MATCH_LIMIT}", timeout=30)
                lines = [_ANSI.sub("", ln) for ln in res.stdout.splitlines()]
                self._logs.append((label, role, lines))
        return self._logs

    def _log_files(self):
        from p2p_ops.connectors import LocalConnector

        out = []
        if self.ctx is not None:
            ctx = self.ctx
            cnode = ctx.fleet.coordinator_node()
            out.append(("coordinator/coordinator.log", "coordinator", ctx.conn(cnode), ctx.coordinator_proc().log))
            for node, inst in ctx.fleet.instances():
                for role in ("server", "engine"):
                    proc = ctx.server_proc(node, inst) if role == "server" else ctx.engine_proc(node, inst)
                    out.append((f"{inst.id}/{role}.log", role, ctx.conn(node), proc.log))
        local = LocalConnector()
        out += [(str(p), "any", local, str(p)) for p in self.extra_logs]
        return out


# ---- checks -----------------------------------------------------------------------------------------------

_RUNNING_ONLY = {"coordinator", "coordinator_url", "registration", "p2p_state", "peer_count", "reach", "memlock",
                 "process", "server_http"}


def _check_doctor(ev: Evidence, name: str) -> list[Observation]:
    got = ev.doctor()
    if got is None:
        return [Observation(f"doctor:{name}", "unknown", "fleet", "no fleet to check (pass -f fleet.yaml)")]
    facts, report = got
    if report.could_not_check:
        return [Observation(f"doctor:{name}", "unknown", "fleet", report.could_not_check)]
    if name in _RUNNING_ONLY and not facts.any_running:
        return [Observation(f"doctor:{name}", "unknown", "fleet", "the fleet is not running")]
    matches = [f for f in report.findings if f.check == name or (name == "agree" and f.check.startswith("agree:"))]
    if not matches:
        return [Observation(f"doctor:{name}", "ok", "fleet", "no finding")]
    return [Observation(f"doctor:{f.check}", "info" if f.severity == "info" else "problem", f.subject,
                        f"{f.message} (seen: {f.value})", f.fix) for f in matches]


def _check_log(ev: Evidence, sig_id: str) -> list[Observation]:
    sig = ev.tree.signatures[sig_id]
    logs = [(label, lines) for label, role, lines in ev.logs() if role in sig.logs or role == "any"]
    if not logs:
        return [Observation(f"log:{sig_id}", "unknown", "logs", "no logs to read")]
    out = []
    for label, lines in logs:
        hits = [ln for ln in lines if sig.regex.search(ln)]
        if hits:
            last = redact_text(hits[-1].strip(), label).text[:300]
            out.append(Observation(f"log:{sig_id}", "problem", label, f"{len(hits)} line(s), last: {last}",
                                   sig.meaning))
    return out or [Observation(f"log:{sig_id}", "ok", "logs", f"'{sig.pattern}' not in {len(logs)} log(s)")]


def _per_server(ev: Evidence, check: str, fn: Callable[[str, str], Optional[Observation]]) -> list[Observation]:
    servers = ev.running_servers()
    if not servers:
        return [Observation(check, "unknown", "fleet", "no server is running")]
    return [o for _, inst, url in servers if (o := fn(inst.id, url)) is not None]


def _metric_p2p_loads(ev: Evidence) -> list[Observation]:
    def one(iid: str, url: str) -> Observation:
        n = probes.metric_sum(ev.metrics(url), "lmcache_mp_l2_load_completed_requests_total", l2_name="p2p")
        return Observation("metric:p2p_loads", "info", iid, f"{n:g} completed loads from peers")
    return _per_server(ev, "metric:p2p_loads", one)


_FAILURE_FIX = {
    "l1_oom": "L1 cannot hold the restore buffers: raise settings.l1_size_gb or lower the eviction watermark",
    "l1_contended": "the chunk was write-locked by a concurrent store: stagger identical prefixes",
    "not_found": "the owner evicted the chunk between lookup and load: give owners more L1",
}


def _metric_prefetch_failure(ev: Evidence) -> list[Observation]:
    def one(iid: str, url: str) -> Observation:
        by_reason: dict[str, float] = {}
        for name, labels, value in ev.metrics(url):
            if name.startswith("lmcache_mp_l2_prefetch_failure") and not name.endswith(("_created", "_bucket")):
                by_reason[labels.get("reason", "?")] = by_reason.get(labels.get("reason", "?"), 0) + value
        bad = {r: v for r, v in by_reason.items() if v > 0}
        if not bad:
            return Observation("metric:prefetch_failure", "ok", iid, "no l2_prefetch_failure")
        return Observation("metric:prefetch_failure", "problem", iid,
                           "l2_prefetch_failure " + ", ".join(f"{r}={v:g}" for r, v in sorted(bad.items())),
                           "; ".join(_FAILURE_FIX.get(r, r) for r in sorted(bad)))
    return _per_server(ev, "metric:prefetch_failure", one)


def _metric_gauge(check: str, metric: str, limit: float, message: str, fix: str):
    def run(ev: Evidence) -> list[Observation]:
        def one(iid: str, url: str) -> Observation:
            v = probes.metric_sum(ev.metrics(url), metric)
            if v >= limit:
                return Observation(check, "problem", iid, f"{metric}={v:g}: {message}", fix)
            return Observation(check, "ok", iid, f"{metric}={v:g}")
        return _per_server(ev, check, one)
    return run


def _metric_load_throughput(ev: Evidence) -> list[Observation]:
    def one(iid: str, url: str) -> Observation:
        buckets = sorted(((float(lab.get("le", "inf")), v) for n, lab, v in ev.metrics(url)
                          if n == "lmcache_mp_l2_load_throughput_GB_per_second_bucket" and lab.get("l2_name") == "p2p"),
                         key=lambda b: b[0])
        total = buckets[-1][1] if buckets else 0
        if not total:
            return Observation("metric:load_throughput", "unknown", iid, "no peer loads measured yet")
        median = next(le for le, cum in buckets if cum >= total / 2)
        return Observation("metric:load_throughput", "info", iid, f"{total:g} peer loads, median <= {median:g} GB/s")
    return _per_server(ev, "metric:load_throughput", one)


def _status_locks(ev: Evidence) -> list[Observation]:
    def one(iid: str, url: str) -> Observation:
        st = probes.server_status(url).raw
        sm = st.get("storage_manager") or {}
        l1 = sm.get("l1_manager") or (sm.get("l1_managers") or {}).get("_default") or {}
        read_locked, jobs = int(l1.get("read_locked_count") or 0), int(st.get("active_p2p_lookup_jobs") or 0)
        detail = f"read_locked_count={read_locked}, active_p2p_lookup_jobs={jobs}"
        if read_locked or jobs:
            return Observation("status:locks", "problem", iid, detail + " (both should be 0 when idle)",
                               "if they never drain at idle, restart this server; abandoned lookups hold read "
                               "locks until the 300 s read TTL")
        return Observation("status:locks", "ok", iid, detail)
    return _per_server(ev, "status:locks", one)


def _engines_health(ev: Evidence) -> list[Observation]:
    if ev.ctx is None or ev.facts is None:
        return [Observation("engines:health", "unknown", "fleet", "no fleet to check")]
    out = []
    for node, inst in ev.ctx.fleet.instances():
        state = next((i.engine_state for i in ev.facts.instances if i.instance == inst.id), "unknown")
        if state != "running":
            if ev.facts.any_running:
                out.append(Observation("engines:health", "problem", inst.id, f"engine process {state}",
                                       f"read {inst.id}/engine.log, then `p2pctl up --no-render`"))
            continue
        ok = probes.engine_healthy(ev.ctx.engine_url(node, inst))
        out.append(Observation("engines:health", "ok" if ok else "problem", inst.id,
                               "answers /health" if ok else "process runs but /health does not answer",
                               "" if ok else f"read {inst.id}/engine.log; the engine may be wedged on its server"))
    return out or [Observation("engines:health", "unknown", "fleet", "the fleet is not running")]


def _node_rdma(ev: Evidence) -> list[Observation]:
    if ev.facts is None:
        return [Observation("node:rdma", "unknown", "fleet", "no fleet to check")]
    out = []
    for n in ev.facts.nodes:
        if n.rdma_devices is None:
            out.append(Observation("node:rdma", "unknown", n.node, n.error or "could not list /sys/class/infiniband"))
        elif n.rdma_devices == 0:
            out.append(Observation("node:rdma", "problem", n.node, "no RDMA device (/sys/class/infiniband is empty): "
                                   "NIXL/UCX moves KV over TCP", "install the NIC driver and rdma-core (or pass "
                                   "/dev/infiniband into the container); run scripts/check_rdma.sh"))
        else:
            out.append(Observation("node:rdma", "ok", n.node, f"{n.rdma_devices} RDMA device(s)"))
    return out


def _env_ucx_rails(ev: Evidence) -> list[Observation]:
    if ev.facts is None:
        return [Observation("env:ucx_rails", "unknown", "fleet", "no fleet to check")]
    out = []
    for i in ev.facts.instances:
        if not i.running:
            continue
        devs, rails = i.process_env.get("UCX_NET_DEVICES"), i.process_env.get("UCX_MAX_RMA_RAILS")
        detail = f"UCX_NET_DEVICES={devs or '(unset: all)'} UCX_MAX_RMA_RAILS={rails or '(unset: NIXL sets 2)'}"
        single = devs and devs != "all" and "," not in devs
        if single or rails == "1":
            out.append(Observation("env:ucx_rails", "problem", i.instance, detail + ": one rail only",
                                   "UCX_NET_DEVICES=all (or every GPU-local NIC) and UCX_MAX_RMA_RAILS=2..8"))
        else:
            out.append(Observation("env:ucx_rails", "ok", i.instance, detail))
    return out or [Observation("env:ucx_rails", "unknown", "fleet", "no server is running")]


def _trace_server_logs(ev: Evidence) -> list[Observation]:
    from p2p_ops.diagnose.trace_report import trace_report
    from p2p_ops.facts.ucx_trace import parse_traces

    if ev.ctx is None:
        return [Observation("trace:server_logs", "unknown", "fleet", "no fleet to check")]
    texts = []
    for node, inst in ev.ctx.fleet.instances():
        log = ev.ctx.server_proc(node, inst).log
        res = ev.ctx.conn(node).run(f"tail -n 20000 {shlex.quote(log)} 2>/dev/null", timeout=30)
        texts.append((f"{inst.id}/server.log", res.stdout))
    rdma = any((n.rdma_devices or 0) > 0 for n in (ev.facts.nodes if ev.facts else []))
    report = trace_report(parse_traces(texts), expect_rdma=rdma)
    if not report.facts.get("endpoints") and not report.problems:
        return [Observation("trace:server_logs", "unknown", "server logs", "no UCX endpoint lines in the server logs",
                            "set UCX_LOG_LEVEL=info and UCX_PROTO_INFO=y in env.sh, restart, pull once")]
    out = [Observation("trace:server_logs", "problem", f.subject, f"{f.message} (seen: {f.value})", f.fix)
           for f in report.problems]
    lanes = ", ".join(f"{e['name']}: {e['payload_class'] or '?'}" for e in report.facts.get("endpoints", []))
    return out or [Observation("trace:server_logs", "ok", "server logs", f"payload lanes: {lanes}")]


CHECKS: dict[str, Callable[[Evidence], list[Observation]]] = {
    "metric:p2p_loads": _metric_p2p_loads,
    "metric:prefetch_failure": _metric_prefetch_failure,
    "metric:l1_usage": _metric_gauge("metric:l1_usage", "lmcache_mp_l1_usage_ratio", 0.8,
                                     "L1 at the 0.8 eviction watermark", "raise settings.l1_size_gb"),
    "metric:active_lookup_jobs": _metric_gauge("metric:active_lookup_jobs", "lmcache_mp_active_p2p_lookup_jobs", 1,
                                               "owner-side lookup jobs held (0 when idle)",
                                               "if it never returns to 0 at idle, restart this server"),
    "metric:load_throughput": _metric_load_throughput,
    "status:locks": _status_locks,
    "engines:health": _engines_health,
    "node:rdma": _node_rdma,
    "env:ucx_rails": _env_ucx_rails,
    "trace:server_logs": _trace_server_logs,
}
DOCTOR_CHECKS = {"agree", "stale_env", "coordinator", "coordinator_url", "registration", "p2p_state", "peer_count",
                 "reach", "memlock", "ucx_tls", "process", "server_http", "port_busy", "port_listening"}


def known_check(tree: Tree, check: str) -> bool:
    kind, _, name = check.partition(":")
    if kind == "doctor":
        return name in DOCTOR_CHECKS
    if kind == "log":
        return name in tree.signatures
    return check in CHECKS


def run_check(ev: Evidence, check: str) -> list[Observation]:
    kind, _, name = check.partition(":")
    try:
        if kind == "doctor":
            return _check_doctor(ev, name)
        if kind == "log":
            return _check_log(ev, name)
        return CHECKS[check](ev)
    except Exception as exc:  # noqa: BLE001 - one failing check must not hide the others
        return [Observation(check, "unknown", "check", f"could not run: {type(exc).__name__}: {exc}")]


# ---- walking a symptom ------------------------------------------------------------------------------------

@dataclass
class StepResult:
    id: str
    ask: str
    verdict: str                       # problem | ok | unknown
    observations: list[Observation] = field(default_factory=list)
    cause: str = ""
    fix: str = ""
    manual: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    symptom: str
    title: str
    fleet: str
    steps: list[StepResult]
    notes: list[str] = field(default_factory=list)

    @property
    def first_problem(self) -> Optional[StepResult]:
        return next((s for s in self.steps if s.verdict == "problem"), None)

    @property
    def exit_code(self) -> int:
        return 1 if self.first_problem else 0

    def to_dict(self) -> dict:
        data = asdict(self)
        first = self.first_problem
        data["likely_cause"] = {"step": first.id, "cause": first.cause, "fix": first.fix,
                                "subjects": sorted({o.subject for o in first.observations if o.status == "problem"})
                                } if first else None
        data["exit_code"] = self.exit_code
        return data


def diagnose(tree: Tree, symptom: Symptom, ev: Evidence) -> Diagnosis:
    steps = []
    for step in symptom.steps:
        obs: list[Observation] = []
        for o in (o for check in step.checks for o in run_check(ev, check)):
            if not any((o.status, o.subject, o.detail) == (x.status, x.subject, x.detail) for x in obs):
                obs.append(o)
        if any(o.status == "problem" for o in obs):
            verdict = "problem"
        elif any(o.status in ("ok", "info") for o in obs):
            verdict = "ok"
        else:
            verdict = "unknown"
        steps.append(StepResult(step.id, step.ask, verdict, obs, step.cause, step.fix, list(step.manual)))
    fleet = ev.ctx.fleet.name if ev.ctx is not None else "(logs only)"
    notes = []
    if ev.facts is not None and not ev.facts.any_running:
        notes.append("the fleet is not running: live checks are skipped, log checks read the last run's logs")
    if ev.ctx is None:
        notes.append("no fleet: only the log signatures were checked, in the --log files")
    return Diagnosis(symptom.id, symptom.title, fleet, steps, notes)


def render_text(d: Diagnosis) -> list[str]:
    lines = [f"diagnose: {d.title} (fleet {d.fleet})"] + [f"note: {n}" for n in d.notes]
    mark = {"problem": "PROBLEM", "ok": "ok", "unknown": "not checked"}
    for n, s in enumerate(d.steps, 1):
        lines.append(f" {n}. {s.ask}  [{mark[s.verdict]}]")
        for o in s.observations:
            if o.status == "problem" or (s.verdict != "problem" and o.status in ("info", "unknown")):
                lines.append(f"      - {o.subject}: {o.detail}")
                if o.fix and o.status == "problem":
                    lines.append(f"        fix: {o.fix}")
        if s.verdict == "problem":
            lines += [f"      cause: {s.cause}", f"      fix:   {s.fix}"]
        if s.manual and s.verdict != "ok":
            lines += [f"      run: {m}" for m in s.manual]
    first = d.first_problem
    if first:
        subjects = sorted({o.subject for o in first.observations if o.status == "problem"})
        lines.append(f"likely cause (step {d.steps.index(first) + 1}, {', '.join(subjects)}): {first.cause}")
    else:
        lines.append("no automated check found a problem; run the manual steps above, then `p2pctl bundle`")
    return lines


# ---- the reference page -----------------------------------------------------------------------------------

def _describe_check(tree: Tree, check: str) -> str:
    kind, _, name = check.partition(":")
    if kind == "log":
        return f"`{check}` (log line `{tree.signatures[name].pattern}`)"
    return f"`{check}`"


def render_markdown(tree: Tree) -> str:
    """references/decision-tree.md, generated: `p2pctl diagnose --markdown > <that file>`."""
    out = ["# Decision tree: symptom -> checks -> cause -> fix", "",
           "<!-- Generated from p2p_ops/diagnose/tree.yaml by `p2pctl diagnose --markdown`; do not edit by hand. -->",
           "", "Run `scripts/diagnose.sh \"SYMPTOM\"` (or `p2pctl diagnose \"SYMPTOM\" -f fleet.yaml`): it walks the "
           "steps below in order, runs the automated checks of each step and prints what it found, the cause and "
           "the fix. `doctor:*` checks are findings of `scripts/doctor.sh`.", "", "## Symptoms", ""]
    out += [f"{n}. [{s.title}](#{s.id}) - `p2pctl diagnose \"{s.title}\"`" for n, s in enumerate(tree.symptoms, 1)]
    for s in tree.symptoms:
        out += ["", f"<a id=\"{s.id}\"></a>", f"## {s.title}", "", f"Looks like: {s.looks_like}", "",
                "Also matched by: " + ", ".join(f"`{a}`" for a in s.aliases), ""]
        for n, st in enumerate(s.steps, 1):
            out.append(f"{n}. **{st.ask}**")
            if st.checks:
                out.append("   - checks: " + ", ".join(_describe_check(tree, c) for c in st.checks))
            for m in st.manual:
                out.append(f"   - run: `{m}`")
            out += [f"   - cause: {st.cause}", f"   - fix: {st.fix}"]
    out += ["", "## Log signatures", "", "| id | pattern (grep -E) | logs | meaning |", "|---|---|---|---|"]
    pipe = "\\|"  # a literal | inside a table cell, even within a code span (GFM)
    out += [f"| `{g.id}` | `{g.pattern.replace('|', pipe)}` | {', '.join(g.logs)} | {g.meaning} |"
            for g in tree.signatures.values()]
    return "\n".join(out) + "\n"
