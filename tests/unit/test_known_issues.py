"""Failures operators reported upstream (issue 41): the doctor warns on a fleet whose installed versions and
settings match one, citing the thread, and never names such a risk as the cause of a miss; the diagnose skill's
references/known-issues.md is the catalogue's upstream fields. Facts are hand-built (test_doctor's builders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.causes import CAUSES, template
from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.judge import judgement
from p2p_ops.diagnose.signatures import SIGNATURES
from tests.unit.test_doctor import env, fleet, inst, node, problems

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / ".claude/skills/lmcache-p2p-diagnose/references/known-issues.md"
MOONCAKE = {"lmcache": "0.5.6", "mooncake-transfer-engine-non-cuda": "0.3.13.post1"}


def _mooncake_fleet(version: str, protocol: str = "tcp") -> D.FleetFacts:
    pe = env(LMCACHE_P2P_TRANSFER_ENGINE="mooncake_te", MC_TE_PROTOCOL=protocol)
    a, b = inst("node-a-0", proc_env=pe), inst("node-b-0", proc_env=pe)
    packages = {**MOONCAKE, "mooncake-transfer-engine-non-cuda": version}
    return fleet([a, b], transfer_engine="mooncake_te",
                 nodes=[node("node-a", packages=packages), node("node-b", packages=packages)])


@pytest.mark.parametrize("version,protocol,warned", [
    ("0.3.13.post1", "tcp", True), ("0.3.14rc1", "tcp", True),
    ("0.3.13.post1", "rdma", False), ("0.3.15", "tcp", False)])
def test_mooncake_tcp_on_a_version_that_rejects_after_idle_is_warned_citing_the_thread(version, protocol, warned):
    facts = _mooncake_fleet(version, protocol)
    report = D.check(facts)
    found = problems(report, "known_issue")
    assert [f.cause.id for f in found] == (["mooncake_tcp_idle"] * 2 if warned else []), report.render()
    if warned:
        f = found[0]
        assert f.severity == "warn" and f.value == f"mooncake {version}, MC_TE_PROTOCOL=tcp"
        assert "Mooncake #4209" in f.message and "0.3.13.post1" in f.message and "transfer_engine nixl" in f.fix
        # A risk, not a cause: the judge names nothing on a fleet where only the risk was found.
        assert judgement(facts, report).cause() is None


@pytest.mark.parametrize("l1,tls,warned", [
    ("8", "rc,tcp", True), ("4", "rc,tcp", False), ("8", "tcp", False), ("8", None, True)])  # unset: UCX picks RDMA
def test_an_l1_over_4_gib_registered_with_nixl_over_rdma_is_warned(l1, tls, warned):
    a = inst("node-a-0", proc_env=env(LMCACHE_L1_SIZE_GB=l1, UCX_TLS=tls))
    # A node that is not on loopback: RDMA is expected unless every UCX_TLS names only TCP/shared memory.
    facts = fleet([a], nodes=[D.NodeFacts("node-a", "198.18.0.1", packages={"lmcache": "0.5.6"}, rdma_devices=1)])
    found = problems(D.check(facts), "known_issue")
    assert [f.cause.id for f in found] == (["nixl_l1_over_4gib"] if warned else [])
    if warned:
        assert found[0].value == "l1_size_gb 8 over RDMA, lmcache 0.5.6" and "LMCache PR #4432" in found[0].message


def test_a_local_fleet_with_a_large_l1_is_not_warned():
    """Loopback moves over shared memory/TCP: the registration cliff is RDMA's."""
    a = inst("node-a-0", proc_env=env(LMCACHE_L1_SIZE_GB="16"))
    assert not problems(D.check(fleet([a])), "known_issue")


@pytest.mark.parametrize("keep_alive,beat,error", [("5", "5", True), ("4", "5", True), ("7", "2", False)])
def test_a_coordinator_keep_alive_at_or_below_the_heartbeat_is_an_error(keep_alive, beat, error):
    a = inst("node-a-0", proc_env=env(LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL=beat))
    facts = fleet([a], coordinator_env={"LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE": keep_alive})
    report = D.check(facts)
    found = problems(report, "keep_alive")
    assert [f.cause.id for f in found] == (["keepalive_short"] if error else [])
    if error:
        assert found[0].value == f"coordinator keep-alive {keep_alive} s, heartbeat interval node-a-0={beat} s"
        assert judgement(facts, report).cause().id == "keepalive_short"


def test_the_heartbeat_failure_upstream_reported_is_a_signature_of_the_same_cause():
    sig = SIGNATURES["keepalive_disconnect"]
    assert sig.cause == "keepalive_short"
    assert sig.regex.search("Coordinator registration/heartbeat failed: Server disconnected without sending a "
                            "response.")


def test_a_frozen_server_is_named_unresponsive_with_the_upstream_deadlock_cited():
    """SIGSTOP or LMCache #4676's deadlock: the process runs, /status does not answer."""
    frozen = inst("node-a-0")
    frozen.status = None
    facts = fleet([frozen, inst("node-b-0")])
    report = D.check(facts)
    [f] = problems(report, "server_http")
    assert f.subject == "node-a-0" and f.cause.id == "server_unresponsive"
    assert judgement(facts, report).cause(["node-a-0"]).id == "server_unresponsive"
    assert "LMCache #4676" in CAUSES["server_unresponsive"].upstream
    # Its listen backlog full, peers' connects to it fail: a consequence, not a second cause.
    facts.nodes[1].reach = [D.Reach("node-b", "node-a-0 p2p", "127.0.0.1", 8551, False)]
    assert not problems(D.check(facts), "reach")
    # 30 s later the coordinator has dropped it: evicted for missed heartbeats, not "not registered" (a setting)
    facts.coordinator_instances = [e for e in facts.coordinator_instances if e["instance_id"] != "node-a-0"]
    report = D.check(facts)
    assert [f.cause.id for f in problems(report, "registration")] == ["instance_evicted"]
    assert judgement(facts, report).cause(["node-a-0"]).id == "instance_evicted"


def known_issues() -> str:
    """The table of every cause with an upstream thread, as references/known-issues.md ends."""
    def cell(text: str) -> str:
        return " ".join(text.replace("|", "\\|").split())
    rows = []
    for c in CAUSES.values():
        if c.upstream:
            sigs = ", ".join(f"`{s.pattern}`" for s in SIGNATURES.values() if s.cause == c.id) or "-"
            rows.append(f"| `{c.id}` | {cell(c.upstream)} | {cell(c.affects)} | {cell(sigs)} | "
                        f"{cell(template(c.fix))} | {cell(c.covered)} |")
    return "\n".join(["| cause id | upstream | affects | log signature | workaround | covered by |",
                      "|---|---|---|---|---|---|", *rows]) + "\n"


def test_every_known_issue_names_its_versions_and_what_covers_it():
    known = [c for c in CAUSES.values() if c.upstream or c.affects or c.covered]
    assert len(known) >= 6
    for c in known:
        assert c.upstream and c.affects and c.covered, c.id
        assert "#" in c.upstream, c.id       # a thread number, checked against its tracker


def test_the_diagnose_skill_lists_every_known_issue_as_the_catalogue_has_it():
    assert PAGE.read_text().endswith(known_issues()), (
        "references/known-issues.md is stale; regenerate its table with:\n  python -c 'from "
        "tests.unit.test_known_issues import known_issues; print(known_issues(), end=\"\")' and replace the table "
        "at the end of the file")
    assert "references/known-issues.md" in (REPO / ".claude/skills/lmcache-p2p-diagnose/SKILL.md").read_text()
