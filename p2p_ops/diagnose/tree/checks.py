"""The tree's automated checks: each reads an `Evidence` and returns `Observation`s naming the subject and, for
a problem, the catalogue's cause its evidence confirms (whose fix the catalogue words).

Add a check: an entry in `CHECKS` (or a signature in diagnose/signatures.yaml for `log:`), then name it in a step.
"""

from __future__ import annotations

import re
from typing import Callable

from p2p_ops.causes import restart, verdict
from p2p_ops.diagnose import explain
from p2p_ops.diagnose.explain.prompt import latest_failed_run
from p2p_ops.diagnose.doctor.checks import rdma_expected
from p2p_ops.diagnose.doctor.nic import PinView, pin_views
from p2p_ops.diagnose.redact import redact_text
from p2p_ops.diagnose.traces import trace_report
from p2p_ops.diagnose.tree.evidence import Evidence, Observation
from p2p_ops.endpoints import engine_api, lmcache_api, metrics_api
from p2p_ops.facts.logs import log_tail_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.facts.ucx_trace import parse_traces
from p2p_ops.spec.transfer_sizes import EVICTION_WATERMARK

# How much of each server log the UCX trace check reads (UCX_LOG_LEVEL=info writes a few lines per endpoint).
TRACE_TAIL_LINES = 20000

_RUNNING_ONLY = {"coordinator", "coordinator_url", "registration", "p2p_state", "peer_count", "reach", "memlock",
                 "process", "server_http", "engine", "engine_degraded", "kv_events", "lookup_leak",
                 "stale_read_locks"}


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
                        f"{f.message} (seen: {f.value})", f.cause, f.severity == "error") for f in matches]


def _check_log(ev: Evidence, sig_id: str) -> list[Observation]:
    sig = ev.tree.signatures[sig_id]
    logs = [(label, role, node, lines) for label, role, node, lines in ev.logs() if role in sig.logs or role == "any"]
    if not logs:
        return [Observation(f"log:{sig_id}", "unknown", "logs", "no logs to read")]
    out = []
    unconfirmed = _not_found_now(ev, sig.confirmed_by, sig.cause) if sig.confirmed_by else ""
    for label, role, node, lines in logs:
        found = [ln for ln in lines if sig.search(ln)]
        peers = _peers_now(ev, label) if sig.ruled_out_by_peer else set()
        live = [ln for ln in found if not any(re.search(rf"\b{re.escape(p)}\b", ln) for p in peers)]
        if live and unconfirmed:
            out.append(Observation(f"log:{sig_id}", "info", label, f"{len(live)} line(s), last: "
                                   f"{redact_text(live[-1].strip(), label).text[:200]}; not confirmed: {unconfirmed}"))
        elif live:
            last = redact_text(live[-1].strip(), label).text[:300]
            owner = label.split("/", 1)[0] if node else label      # a fleet log's instance, or the --log file
            again = restart((node or "<node>", role if role != "any" else "server"))
            out.append(Observation(f"log:{sig_id}", "problem", label, f"{len(live)} line(s), last: {last}",
                                   verdict(sig.cause, owner, (f"log:{sig_id} {label}", last), log=label,
                                           instance=owner, node=node or "<node>", restart=again)))
        elif found:
            out.append(Observation(f"log:{sig_id}", "info", label, f"{len(found)} line(s) about peer(s) this server "
                                   f"now lists ({', '.join(sorted(peers))}): ruled out, since recovered"))
    return out or [Observation(f"log:{sig_id}", "ok", "logs", f"'{sig.pattern}' not in {len(logs)} log(s)")]


def _not_found_now(ev: Evidence, check: str, cause: str) -> str:
    """Why a signature's lines do not confirm `cause` ('' when they do): the doctor's `check`, which reads the
    setting behind them, does not find it now."""
    got = ev.doctor()
    if got is None or got[1].could_not_check:
        return ""
    if any(f.check == check and f.cause and f.cause.id == cause for f in got[1].findings):
        return ""
    return f"the doctor's {check} check does not find {cause} now (the lines predate a fix, or another cause)"


def _peers_now(ev: Evidence, label: str) -> set[str]:
    """The peers the server whose log this is lists now (its /status), by instance id."""
    owner = label.split("/", 1)[0]
    inst = next((i for i in ev.facts.instances if i.instance == owner), None) if ev.facts is not None else None
    return set((inst.status or {}).get("p2p_peers") or []) if inst is not None else set()


def _per_server(check: str):
    """A check of one running server (evidence, instance id, server url) run on each of them."""
    def wrap(one: Callable[[Evidence, str, str], Observation]) -> Callable[[Evidence], list[Observation]]:
        def run(ev: Evidence) -> list[Observation]:
            servers = ev.running_servers()
            if not servers:
                return [Observation(check, "unknown", "fleet", "no server is running")]
            return [one(ev, inst.id, url) for _, inst, url in servers]
        return run
    return wrap


@_per_server("metric:p2p_loads")
def _metric_p2p_loads(ev: Evidence, iid: str, url: str) -> Observation:
    n = metrics_api.metric_sum(ev.metrics(url), metrics_api.P2P_LOADS, l2_name="p2p")
    return Observation("metric:p2p_loads", "info", iid, f"{n:g} completed loads from peers")


@_per_server("metric:l1_evictions")
def _metric_l1_evictions(ev: Evidence, iid: str, url: str) -> Observation:
    # The passes, not lmcache_mp_l1_evicted_chunks_total: that also counts every pulled chunk freed after its read.
    samples = ev.metrics(url)
    runs = metrics_api.metric_sum(samples, metrics_api.L1_EVICTION_RUNS)
    if not runs:
        return Observation("metric:l1_evictions", "ok", iid, "its L1's eviction loop never ran since it started")
    seen = (f"its L1's eviction loop ran {runs:g} time(s) since it started "
            f"({metrics_api.metric_sum(samples, metrics_api.L1_EVICTED):g} chunks deleted)")
    return Observation("metric:l1_evictions", "problem", iid, f"{seen}: a prefix computed before then may be gone "
                       "from it", verdict("evicted", iid, (f"metric:{metrics_api.L1_EVICTION_RUNS}", seen)))


def _metric_prefetch_failure(ev: Evidence) -> list[Observation]:
    """One observation per server and fallback reason: each reason is a cause of the catalogue."""
    out = []
    for _, inst, url in ev.running_servers():
        bad = metrics_api.prefetch_failures(ev.metrics(url))
        out += [Observation("metric:prefetch_failure", "problem", inst.id, f"l2_prefetch_failure {r}={v:g}",
                            verdict(r if r in metrics_api.PREFETCH_REASONS else "prefetch_fallback", inst.id,
                                    (f"metric:{metrics_api.PREFETCH_FAILURES}", f"reason={r}: {v:g}")))
                for r, v in sorted(bad.items())]
        if not bad:
            out.append(Observation("metric:prefetch_failure", "ok", inst.id, "no l2_prefetch_failure"))
    return out or [Observation("metric:prefetch_failure", "unknown", "fleet", "no server is running")]


def _metric_gauge(check: str, metric: str, limit: float, message: str, cause: str):
    @_per_server(check)
    def one(ev: Evidence, iid: str, url: str) -> Observation:
        v = metrics_api.metric_sum(ev.metrics(url), metric)
        if v >= limit:
            return Observation(check, "problem", iid, f"{metric}={v:g}: {message}",
                               verdict(cause, iid, (f"metric:{metric}", f"{v:g}"), restart=ev.restart(iid)))
        return Observation(check, "ok", iid, f"{metric}={v:g}")
    return one


@_per_server("metric:load_throughput")
def _metric_load_throughput(ev: Evidence, iid: str, url: str) -> Observation:
    buckets = sorted(((float(lab.get("le", "inf")), v) for n, lab, v in ev.metrics(url)
                      if n == metrics_api.LOAD_THROUGHPUT_BUCKETS and lab.get("l2_name") == "p2p"), key=lambda b: b[0])
    total = buckets[-1][1] if buckets else 0
    if not total:
        return Observation("metric:load_throughput", "unknown", iid, "no peer loads measured yet")
    median = next(le for le, cum in buckets if cum >= total / 2)
    return Observation("metric:load_throughput", "info", iid, f"{total:g} peer loads, median <= {median:g} GB/s")


@_per_server("status:locks")
def _status_locks(ev: Evidence, iid: str, url: str) -> Observation:
    st = lmcache_api.server_status(url).raw
    l1 = lmcache_api.l1_manager(st)
    read_locked, jobs = int(l1.get("read_locked_count") or 0), int(st.get("active_p2p_lookup_jobs") or 0)
    detail = f"read_locked_count={read_locked}, active_p2p_lookup_jobs={jobs}"
    if read_locked or jobs:
        return Observation("status:locks", "problem", iid, detail + " (both should be 0 when idle)",
                           verdict("stale_read_locks", iid, ("status:locks", detail), restart=ev.restart(iid)))
    return Observation("status:locks", "ok", iid, detail)


def _explain_last_failed(ev: Evidence) -> list[Observation]:
    """`p2pctl explain` on the newest saved request that missed the cache (a failed proof or stress miss)."""
    folder = latest_failed_run(ev.ctx.layout.tests)
    if folder is None:
        return [Observation("explain:last_failed", "unknown", "test runs", "no saved request missed the cache (run "
                            "`p2pctl test basic`: when B misses, it saves the prompt and explain's verdict)")]
    spec, ex = explain.run_saved(ev.ctx, str(folder))
    again = f"`p2pctl explain --run {folder} --request {spec.recorded.get('request')}`"
    # A miss whose reason confirms no cause (never computed, not held any more for want of evidence, ...) is what
    # that run saw, not a cause of anything now.
    out = [Observation("explain:last_failed", "ok" if not n.count("recompute") else
                       "problem" if n.causes and n.causes[0].confirmed else "info", n.instance,
                       f"[{n.strip}] {n.verdict} ({again})", n.causes[0] if n.causes else None) for n in ex.nodes]
    return out or [Observation("explain:last_failed", "unknown", str(folder), "nothing to explain")]


def _engines_health(ev: Evidence) -> list[Observation]:
    out = []
    for node, inst in ev.ctx.fleet.instances():
        state = next((i.engine_state for i in ev.facts.instances if i.instance == inst.id), "unknown")
        if state != "running" and not ev.facts.any_running:
            continue
        ok = state == "running" and engine_api.engine_healthy(ev.ctx.engine_url(node, inst))
        seen = "answers /health" if ok else f"engine process {state}" if state != "running" else \
            "process runs but /health does not answer"
        out.append(Observation("engines:health", "ok" if ok else "problem", inst.id, seen, None if ok else verdict(
            "engine_down", inst.id, ("engines:health", seen), instance=inst.id, restart=ev.restart(inst.id, "engine"))))
    return out or [Observation("engines:health", "unknown", "fleet", "the fleet is not running")]


def _node_rdma(ev: Evidence) -> list[Observation]:
    wanted, why = rdma_expected(ev.facts)
    out = []
    for n in ev.facts.nodes:
        if not wanted:
            out.append(Observation("node:rdma", "n/a", n.node, f"{n.rdma_devices or 0} RDMA device(s); not "
                                   f"applicable: {why}"))
        elif n.rdma_devices is None:
            out.append(Observation("node:rdma", "unknown", n.node, n.error or "could not list /sys/class/infiniband"))
        elif n.rdma_devices == 0:
            seen = "no RDMA device (/sys/class/infiniband is empty)"
            out.append(Observation("node:rdma", "problem", n.node, f"{seen}: NIXL/UCX moves KV over TCP",
                                   verdict("no_rdma", n.node, ("node:rdma", seen))))
        else:
            out.append(Observation("node:rdma", "ok", n.node, f"{n.rdma_devices} RDMA device(s)"))
    return out


def _env_ucx_rails(ev: Evidence) -> list[Observation]:
    out = []
    # One rail is right where the NIC plan gives one (a GPU's own PIX NIC); which one is the plan step's job.
    views = {v.instance: v for v in pin_views(ev.facts)}
    planned_one = {k for k, v in views.items() if not v.narrow and len(v.plan.devices) == 1}
    for i in ev.facts.instances:
        if not i.running:
            continue
        devs, rails = i.process_env.get("UCX_NET_DEVICES"), i.process_env.get("UCX_MAX_RMA_RAILS")
        detail = f"UCX_NET_DEVICES={devs or '(unset: all)'} UCX_MAX_RMA_RAILS={rails or '(unset: NIXL sets 2)'}"
        single = devs and devs != "all" and "," not in devs
        if (single or rails == "1") and i.instance not in planned_one:
            planned = views.get(i.instance)
            out.append(Observation("env:ucx_rails", "problem", i.instance, detail + ": one rail only",
                                   verdict("nic_pin", i.instance, ("env:ucx_rails", detail), **planned.fix)
                                   if planned and planned.plan.devices else
                                   verdict("single_rail", i.instance, ("env:ucx_rails", detail))))
        else:
            out.append(Observation("env:ucx_rails", "ok", i.instance, detail))
    return out or [Observation("env:ucx_rails", "unknown", "fleet", "no server is running")]


def _pin_shown(view: PinView) -> str:
    plan = view.plan
    return (f"UCX_NET_DEVICES={view.pin or '(unset: all)'} ({view.where}); plan: {plan.net_devices or '(none active)'} "
            f"{plan.max_rma_rails} rail(s) ({plan.why})")


def _nic_plan(ev: Evidence) -> list[Observation]:
    """Each pin against its NIC plan: one that leaves the plan's rails unused is the problem here; one on a down
    or remote-NUMA port is the doctor's `nic_pin`, which the same step runs, so it is not reported twice."""
    out = []
    for view in pin_views(ev.facts):
        if view.narrow:
            out.append(Observation("nic:plan", "problem", view.instance, f"{view.narrow}; {_pin_shown(view)}",
                                   verdict("nic_pin", view.instance, ("nic:plan", view.narrow), **view.fix)))
        elif view.wrong:
            out.append(Observation("nic:plan", "info", view.instance,
                                   f"{_pin_shown(view)}; see nic_pin: {'; '.join(view.wrong)}"))
        else:
            out.append(Observation("nic:plan", "ok", view.instance, _pin_shown(view)))
    return out or [Observation("nic:plan", "unknown", "fleet", "no node with RDMA devices read: nothing to plan")]


def _trace_server_logs(ev: Evidence) -> list[Observation]:
    texts = []
    for unit in ev.ctx.units(roles=("server",)):
        lines = read_fact(ev.ctx.conn(unit.node), log_tail_fact(ev.ctx.proc(unit).log, TRACE_TAIL_LINES), timeout=30)
        texts.append((f"{unit.folder}/server.log", "\n".join(lines)))
    rdma = any((n.rdma_devices or 0) > 0 for n in (ev.facts.nodes if ev.facts else []))
    report = trace_report(parse_traces(texts), expect_rdma=rdma)
    if not report.facts.get("endpoints") and not report.problems:
        return [Observation("trace:server_logs", "unknown", "server logs", "no UCX endpoint lines in the server logs",
                            verdict("no_ucx_trace", "server logs"))]
    out = [Observation("trace:server_logs", "problem", f.subject, f"{f.message} (seen: {f.value})", f.cause,
                       f.severity == "error") for f in report.problems]
    lanes = ", ".join(f"{e['name']}: {e['payload_class'] or '?'}" for e in report.facts.get("endpoints", []))
    return out or [Observation("trace:server_logs", "ok", "server logs", f"payload lanes: {lanes}")]


CHECKS: dict[str, Callable[[Evidence], list[Observation]]] = {
    "metric:p2p_loads": _metric_p2p_loads,
    "metric:prefetch_failure": _metric_prefetch_failure,
    "metric:l1_evictions": _metric_l1_evictions,
    "metric:l1_usage": _metric_gauge("metric:l1_usage", metrics_api.L1_RATIO, EVICTION_WATERMARK,
                                     f"L1 at its {EVICTION_WATERMARK:.0%} eviction watermark", "l1_full"),
    "metric:active_lookup_jobs": _metric_gauge("metric:active_lookup_jobs", metrics_api.ACTIVE_LOOKUP_JOBS, 1,
                                               "owner-side lookup jobs held (0 when idle)", "stale_read_locks"),
    "metric:load_throughput": _metric_load_throughput,
    "status:locks": _status_locks,
    "engines:health": _engines_health,
    "node:rdma": _node_rdma,
    "env:ucx_rails": _env_ucx_rails,
    "nic:plan": _nic_plan,
    "trace:server_logs": _trace_server_logs,
    "explain:last_failed": _explain_last_failed,
}


# Checks that read the doctor's facts, or the fleet itself; the others say on their own what they lack.
_NEED_FACTS = {"engines:health", "node:rdma", "env:ucx_rails", "nic:plan"}
_NEED_CTX = {"engines:health", "trace:server_logs", "explain:last_failed"}


def run_check(ev: Evidence, check: str) -> list[Observation]:
    kind, _, name = check.partition(":")
    try:
        if kind == "doctor":
            return _check_doctor(ev, name)
        if kind == "log":
            return _check_log(ev, name)
        if (check in _NEED_FACTS and ev.facts is None) or (check in _NEED_CTX and ev.ctx is None):
            return [Observation(check, "unknown", "fleet", "no fleet to check (pass -f fleet.yaml)")]
        return CHECKS[check](ev)
    except Exception as exc:  # noqa: BLE001 - one failing check must not hide the others
        return [Observation(check, "unknown", "check", f"could not run: {type(exc).__name__}: {exc}")]
