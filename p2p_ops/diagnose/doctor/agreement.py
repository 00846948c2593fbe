"""The doctor's agreement checks (pure): must-agree values across peers, naming the odd one out against the
majority; env.sh files that drifted from the spec's rendering or changed under a running server; and for
each, the smallest fix: which node, which role, one command.

A fleet of three where node-c's server was restarted by hand at chunk size 512 reads

    [ERROR] node-c-0: chunk_size differs across peers: node-c-0=512 is the odd one out (coordinator,
            node-a-0, node-b-0 use 256) ...
            fix (chunk_size_differs): one settings.chunk_size in fleet.yaml (the coordinator's --chunk-size
            too); restart what differs from it (chunk_size=256): p2pctl down --node node-c --role server &&
            p2pctl up --node node-c --role server

(`up --node X` re-renders that node's env.sh from fleet.yaml first). With two peers there is no majority and
both are named. The wording of each fix is the catalogue's (`p2p_ops.causes`); here are its values.
"""

from __future__ import annotations

from typing import Optional

from p2p_ops import causes
from p2p_ops.diagnose.doctor.model import FleetFacts, NodeFacts
from p2p_ops.diagnose.doctor.peers import observed
from p2p_ops.diagnose.findings import Report
from p2p_ops.spec.agreement import BY_KEY, MUST_AGREE, split
from p2p_ops.spec.layout import COORDINATOR

# Which process holds a must-agree value (the one to restart when it is wrong).
ENGINE_KEYS = ("model", "engine_model", "world_size", "vllm_block_size", "vllm_parallel", "vllm_dtype",
               "vllm_kv_cache_dtype", "vllm_model", "vllm_revision", "vllm_hash_seed")


def names_of(values: dict[str, object]) -> str:
    return ", ".join(sorted(values))


def pairs(values: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def restart(facts: FleetFacts, who: list[str], role: str) -> str:
    """The commands that restart `role` on the nodes of these instances (the coordinator's own role for it),
    re-rendering their env.sh from fleet.yaml (`up --node` renders that node first)."""
    by_inst = {i.instance: i.node for i in facts.instances}
    return causes.restart(*((facts.coordinator_node, "coordinator") if w == COORDINATOR else (by_inst.get(w, w), role)
                            for w in sorted(who)))


def _spec_value(facts: FleetFacts, inst: str, key: str) -> Optional[str]:
    rule = BY_KEY[key]
    if not rule.env:
        return None
    if inst == COORDINATOR:
        return (facts.coordinator_spec_env or {}).get("LMCACHE_MP_COORDINATOR_" + key.upper())
    i = next((x for x in facts.instances if x.instance == inst), None)
    return (i.spec_env or {}).get(rule.env) if i else None


def smallest_fix(facts: FleetFacts, key: str, values: dict[str, str]) -> dict[str, str]:
    """The values of the cause's fix: restart only what differs from the spec (or, for keys the spec does not
    set, the odd ones out; with no majority, every one), and the value it must have."""
    role = "engine" if key in ENGINE_KEYS else "server"
    spec = {inst: _spec_value(facts, inst, key) for inst in values}
    off_spec = sorted(inst for inst, v in values.items() if spec[inst] is not None and v != spec[inst])
    sp = split(values)
    who = off_spec or (sorted(sp.odd) if sp.odd and not sp.tie else sorted(values))
    want = next((spec[i] for i in off_spec), None) or sp.majority_value or "one value"
    return {"want": str(want), "restart": restart(facts, who, role), "setting": key,
            "package": key.removesuffix("_version")}


def _seed_mismatch_severity(facts: FleetFacts, per_inst: dict[str, dict]) -> tuple[str, str]:
    """How bad differing PYTHONHASHSEEDs are, judged by what each instance really runs, not by the spec."""
    real = {name: obs.get("hash_algorithm", ("blake3", ""))[0] for name, obs in per_inst.items()}
    fallback = sorted(i.instance for i in facts.instances if i.hash_fallback)
    if facts.runtime != "vllm" and not fallback and all(alg == "blake3" for alg in real.values()):
        return "warn", (" Harmless today: every instance hashes with blake3 (" + pairs(real) + "), which does "
                        "not use PYTHONHASHSEED; keep them equal anyway, other hash algorithms depend on it.")
    why = (f" {', '.join(fallback)} hash(es) with Python's builtin hash (LMCache could not load the algorithm from "
           "vLLM)" if fallback else f" hash algorithms in use: {pairs(real)}")
    return "error", (f"{why}: every chunk hash depends on the seed, so these peers share nothing (zero cached "
                     "tokens, no error).")


def check_agreement(report: Report, facts: FleetFacts) -> dict[str, dict[str, tuple[str, str]]]:
    per_inst = {i.instance: observed(i, (facts.node(i.node) or NodeFacts(i.node, i.address)).packages)
                for i in facts.instances}
    agreed: dict[str, str] = {}
    for key in [m.key for m in MUST_AGREE if any(m.key in v for v in per_inst.values())]:
        values = {inst: obs[key][0] for inst, obs in per_inst.items() if key in obs}
        if key in ("chunk_size", "hash_algorithm") and (
                cval := (facts.coordinator_env or {}).get("LMCACHE_MP_COORDINATOR_" + key.upper())):
            values[COORDINATOR] = cval
        if len(set(values.values())) <= 1:  # never empty: the key was read from at least one instance
            agreed[key] = next(iter(values.values()))
            continue
        sources = sorted({obs[key][1] for obs in per_inst.values() if key in obs})
        severity, note = BY_KEY[key].severity, ""
        if key == "PYTHONHASHSEED":
            severity, note = _seed_mismatch_severity(facts, per_inst)
        sp = split(values)
        subject = names_of(sp.odd) if sp.odd and not sp.tie else names_of(values)
        odd = (f" {names_of(sp.odd)} {'is the odd one' if len(sp.odd) == 1 else 'are the odd ones'} out "
               f"({names_of(dict.fromkeys(sp.majority))} use {sp.majority_value})."
               if sp.odd and not sp.tie else "")
        report.add(severity, f"agree:{key}", subject, pairs(values),
                   f"{key} differs across peers (read from {', '.join(sources)}).{odd}{note}", BY_KEY[key].cause,
                   **smallest_fix(facts, key, values))
    report.facts["agreed"] = agreed
    check_stale_env(report, facts)
    check_env_drift(report, facts)
    return per_inst


def check_stale_env(report: Report, facts: FleetFacts) -> None:
    """env.sh edited after the server started: the running process still uses the old value."""
    for inst in facts.instances:
        if not inst.running or not inst.process_env or not inst.env_file or inst.env_file_rendered:
            continue
        for key, live in inst.process_env.items():
            on_disk = inst.env_file.get(key)
            if live is not None and on_disk is not None and live != on_disk:
                report.add("warn", "stale_env", inst.instance, f"process {key}={live}, env.sh {key}={on_disk}",
                           f"env.sh changed after {inst.instance}'s server started; the running server uses the "
                           "old value", "stale_env", restart=restart(facts, [inst.instance], "server"))


def check_env_drift(report: Report, facts: FleetFacts) -> None:
    """An env.sh that no longer matches fleet.yaml (hand-edited, or rendered from an older spec)."""
    for inst in facts.instances:
        if inst.env_file_rendered or inst.env_file is None or inst.spec_env is None:
            continue
        disk, spec = inst.env_file, inst.spec_env
        # Only the variables the doctor reads differ here: values the shell computes at start are in neither.
        shown = [f"{k}: env.sh {disk.get(k) or '(unset)'}, fleet.yaml renders {spec.get(k) or '(unset)'}"
                 for k in sorted(set(disk) | set(spec)) if disk.get(k) != spec.get(k)]
        shown += [f"not rendered by p2pctl: {line}" for line in inst.env_foreign]
        if shown:
            report.add("warn", "env_drift", inst.instance, ", ".join(shown),
                       f"{inst.instance}'s env.sh (node {inst.node}) no longer matches what fleet.yaml renders: "
                       "it was edited by hand or rendered from an older spec (a line not in p2pctl's "
                       "`export KEY=value` format is shown, never read as harmless: bash would run it)", "env_drift",
                       restart=restart(facts, [inst.instance], "server"))
