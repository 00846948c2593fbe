"""A server that died at start: the doctor reads the end of its log and names LMCache's start-up refusal as the
cause, in the spec's words (issue 40, item 5). The logs are real 0.5.6 servers' (tests/fixtures/diagnose/
start_refusals/), grepped by the same command the doctor's gather sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.doctor.gather import doctor_batch
from p2p_ops.diagnose.doctor.checks import START_REFUSALS
from p2p_ops.diagnose.judge import judgement
from p2p_ops.causes import CAUSES
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.facts.logs import recent_grep_fact

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "start_refusals"
ENV = {"LMCACHE_L1_SIZE_GB": "0.1", "LMCACHE_L1_ALIGN_BYTES": "65536", "LMCACHE_P2P_TRANSFER_ENGINE": "nixl"}
CLASH = ("[2026-12-04 18:30:02,114] LMCache ERROR: ValueError: --coordinator-event-reporting rides the "
         "observability event bus: remove --disable-observability to report cache events.")


def _start_log(name: str) -> list[str]:
    patterns = [SIGNATURES[c].pattern for c in START_REFUSALS]
    return recent_grep_fact(str(LOGS / name), patterns, 400, 5).collect()


def _facts(start_log: list[str], state: str = "dead", env_file: dict | None = None,
           spec_env: dict | None = None) -> D.FleetFacts:
    dead = D.InstanceFacts("node-d-0", "node-d", "127.0.0.1", env_file=env_file or ENV, spec_env=spec_env or ENV,
                           server_state=state, start_log=start_log)
    return D.FleetFacts("t", "embedded", "http://127.0.0.1:9300", "node-a", coordinator_state="running",
                        coordinator_healthy=True, coordinator_instances=[], instances=[dead])


def _found(facts: D.FleetFacts, check: str) -> list:
    return [f for f in D.check(facts).problems if f.check == check]


def test_a_server_dead_of_an_l1_that_is_not_whole_pages_is_named_with_the_nearest_sizes():
    facts = _facts(_start_log("l1_misaligned.log"))
    [f] = _found(facts, "l1_misaligned")
    assert f.subject == "node-d-0/server" and "NIXL_ERR_NOT_FOUND" in f.value
    assert f.message == ("node-d-0's server died at start because its l1_size_gb 0.1 GiB is 107374182 bytes, not a "
                         "multiple of l1_align_bytes (65536 bytes): NIXL registers L1 in pages of that size and a "
                         "partial last one stops the server at start (NIXL_ERR_NOT_FOUND in prep_xfer_dlist); nearest "
                         "valid 0.0999755859375 or 0.10003662109375")
    assert f.cause.id == "l1_misaligned" and f.cause.fix.startswith(
        "an L1 of whole pages (0.0999755859375 or 0.10003662109375 GiB are the nearest to this one")
    assert f.cause.fix.endswith("p2pctl down --node node-d --role server && p2pctl up --node node-d --role server")
    # The judge names it, not the dead process it explains.
    report = D.check(facts)
    assert judgement(facts, report).cause(["node-d-0"]).id == "l1_misaligned"
    assert CAUSES["l1_misaligned"].scope == "instance"


def test_an_env_sh_edited_by_hand_is_fixed_by_the_restart_that_renders_it_again():
    """The restart re-renders env.sh from fleet.yaml, whose L1 (1 GiB) is whole pages: the same fix."""
    [f] = _found(_facts(_start_log("l1_misaligned.log"), spec_env={**ENV, "LMCACHE_L1_SIZE_GB": "1"}),
                 "l1_misaligned")
    assert f.cause.id == "l1_misaligned" and "p2pctl up --node node-d --role server" in f.cause.fix


@pytest.mark.parametrize("why,facts", [
    ("whole pages: NIXL_ERR_NOT_FOUND had another cause", lambda lines: _facts(lines, env_file={
        **ENV, "LMCACHE_L1_SIZE_GB": "0.125"})),
    ("a running server's log says nothing about its start", lambda lines: _facts(lines, state="running")),
    ("a server stopped on purpose", lambda lines: _facts(lines, state="none")),
    ("env.sh does not say its L1", lambda lines: _facts(lines, env_file={"LMCACHE_CHUNK_SIZE": "256"})),
])
def test_no_l1_cause_without_its_evidence(why, facts):
    assert not _found(facts(_start_log("l1_misaligned.log")), "l1_misaligned"), why


def test_a_transfer_engine_lmcache_lacks_and_a_clashing_flag_are_named():
    [f] = _found(_facts(_start_log("no_transfer_channel.log")), "no_transfer_channel")
    assert "Unsupported transfer_channel_type: 'tcp'" in f.value and f.cause.id == "no_transfer_channel"
    assert "settings.transfer_engine to nixl" in f.cause.fix and CAUSES["no_transfer_channel"].scope == "fleet"
    [f] = _found(_facts([CLASH]), "server_args_clash")
    assert f.cause.id == "server_args_clash" and "server_extra_args" in f.cause.fix


def test_the_doctor_reads_the_end_of_a_dead_servers_log_only(fakes):
    ctx = fakes.fleet(2).ctx
    node = ctx.fleet.nodes[0]
    server = ctx.proc("server", node.instances[0])
    for state, read in (("dead", True), ("stale", True), ("none", False)):
        seen = D.FleetFacts(ctx.fleet.name, ctx.fleet.runtime, ctx.fleet.coordinator_url, "node-a",
                            proc_states={server.name: state})
        fact = doctor_batch(ctx, node, seen, {}, reach=False).get("startlog node-a-0")
        assert (fact is not None and server.log in fact.shell) == read, state
