"""Turn a parsed UCX/NIXL trace (`p2p_ops.facts.ucx_trace.TraceSummary`) into a diagnose `Report`.

Findings: each grouped ERROR/FATAL (error) and WARN (warn) line with the cause its signature names (`ucx_error`
where none does), each endpoint whose payload is emulated or not on RDMA when RDMA was
expected, and an info line per endpoint naming its lanes.
"""

from __future__ import annotations

from dataclasses import asdict

from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.nixl.failures import classify
from p2p_ops.facts.ucx_trace import TraceSummary

_SEVERITY = {"FATAL": "error", "ERROR": "error", "WARN": "warn"}


def trace_report(summary: TraceSummary, expect_rdma: bool = False) -> Report:
    report = Report("UCX/NIXL trace", source="ucx-trace")
    report.facts.update(
        ucx_versions=summary.ucx_versions, ucx_env=summary.ucx_env, nixl_ucx_config=summary.nixl_ucx_config,
        nixl_agents=summary.nixl_agents, transports=summary.transports, exceptions=summary.exceptions,
        endpoints=[{
            "process": f"{ep.host}:{ep.pid}", "name": ep.name, "kinds": ep.kinds, "transports": ep.transports,
            "payload_class": ep.payload_class, "payload_lanes": ep.payload_lanes, "emulated": ep.emulated,
            "payload_source": ep.payload_source,
            "protocols": [{"operation": t.operation, "rows": [
                f"{r.range} | {'(?) ' if r.estimated else ''}{r.protocol} | {' and '.join(r.lanes)}"
                for r in t.rows]} for t in ep.tables]} for ep in summary.endpoints],
        errors=[asdict(g) for g in summary.errors],
        lines={"read": summary.lines_read, "understood": summary.lines_understood},
    )
    if summary.lines_understood == 0:
        report.could_not_check = "no UCX or NIXL log lines found (was UCX_LOG_LEVEL=info set?)"
        return report
    for group in summary.errors:
        severity = _SEVERITY.get(group.level)
        if severity is None:
            continue  # DIAG lines (e.g. no rdmacm on a host without RDMA) are context, not faults
        cause = classify(group.message)
        report.add(severity, f"{group.source}_log", group.first_seen, f"x{group.count}", group.message,
                   cause.id if cause else "ucx_error")
    for ep in summary.endpoints:
        subject = f"{ep.host}:{ep.pid} {ep.name}".strip()
        lanes = ", ".join(ep.payload_lanes) or "?"
        # Only endpoints to other hosts must be RDMA; same-process and same-host ones rightly use shm/cma.
        remote = not ({"self", "intra-node"} & set(ep.name.split()))
        if expect_rdma and remote and ep.payload_lanes and (ep.emulated or ep.payload_class != "rdma"):
            report.add("error", "payload_path", subject, f"{ep.payload_class or '?'} ({lanes})",
                       "payload does not move by RDMA" + (" (software emulation)" if ep.emulated else ""),
                       "payload_not_rdma")
        else:
            kind = "emulated over " if ep.emulated else ""
            report.add("info", "payload_path", subject, ep.payload_source or "no data protocol logged",
                       f"payload {kind}{ep.payload_class or '?'}: {lanes}")
    return report


_SHOWN_OPS = ("ucp_get", "ucp_put", "rendezvous", "tag_send")


def render_endpoints(report: Report) -> list[str]:
    """Compact per-endpoint lines for the human output: lanes plus the data-moving protocol tables only
    (active-message tables are in the JSON)."""
    lines = []
    for ep in report.facts.get("endpoints", []):
        kinds = "  ".join(f"{k}({' '.join(v)})" for k, v in ep["kinds"].items())
        lines.append(f"  {ep['process']} {ep['name']}: {kinds or '-'}")
        shown = [p for p in ep["protocols"] if any(op in p["operation"] for op in _SHOWN_OPS)]
        lines += [f"      {proto['operation']}: " + "; ".join(proto["rows"]) for proto in shown]
        if len(ep["protocols"]) > len(shown):
            lines.append(f"      (+{len(ep['protocols']) - len(shown)} active-message tables in --json)")
    return lines
