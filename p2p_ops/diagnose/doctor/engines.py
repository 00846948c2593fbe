"""The doctor's engine checks (pure): every engine the fleet runs belongs in the report, a degraded one too.

An embedded engine whose lmcache server refused it (a chunk size that differs, the server down) keeps serving
as a plain engine: it answers /health, shares nothing and logs why. `p2pctl wait` calls that "degraded"; so
does the doctor, with the engine's own log line as the evidence.
"""

from __future__ import annotations

from p2p_ops.diagnose.doctor.agreement import restart
from p2p_ops.diagnose.doctor.model import FleetFacts
from p2p_ops.diagnose.findings import Report


def check_engines(report: Report, facts: FleetFacts) -> None:
    for inst in facts.instances:
        subject = f"{inst.instance}/engine"
        if inst.engine_state in ("dead", "stale"):
            report.add("error", "engine", subject, inst.engine_state,
                       f"{inst.instance}'s engine is {inst.engine_state} while the fleet runs",
                       f"read {inst.instance}/engine.log, then {restart(facts, [inst.instance], 'engine')}")
        elif inst.engine_health == "no answer":
            report.add("error", "engine", subject, "process runs, /health does not answer",
                       f"{inst.instance}'s engine runs but does not answer (still loading, or wedged)",
                       f"read {inst.instance}/engine.log; if it stays so, {restart(facts, [inst.instance], 'engine')}")
        elif inst.engine_health == "degraded":
            said = inst.engine_log[-1][:300] if inst.engine_log else "its log names no reason"
            report.add("error", "engine_degraded", subject, said,
                       f"{inst.instance}'s engine is degraded: it serves without its lmcache server, so it "
                       "neither stores nor pulls anything (the fleet shares nothing through it)",
                       "fix the server it cannot use (see the findings on "
                       f"{inst.instance}); the engine relinks by itself once its server agrees")


def check_kv_events(report: Report, facts: FleetFacts) -> None:
    """A router fleet needs KV events from every engine (what kv_aware routes on, and llm-d's P2P path seeds)."""
    if not facts.kv_events_expected:
        return
    for inst in facts.instances:
        if inst.engine_state == "running" and inst.engine_flags.get("kv_events") == "off":
            report.add("error", "kv_events", f"{inst.instance}/engine", "no --kv-events-config with "
                       "enable_kv_cache_events", f"{inst.instance}'s engine publishes no KV events, so the router "
                       "cannot see what it holds", f"restart it from fleet.yaml (router.kv_events: true): "
                       f"{restart(facts, [inst.instance], 'engine')}")
