"""The symptom decision tree: its data is complete, its reference page is current, and it runs on logs alone."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from p2p_ops.causes import CAUSES
from p2p_ops.diagnose.tree import checks, evidence, model, render, walk
from p2p_ops.errors import BadInput

TREE = model.load_tree()
SKILL = Path(__file__).resolve().parents[2] / ".claude" / "skills" / "lmcache-p2p-diagnose"
REQUIRED = {"peers-not-registered", "nixl-err-backend", "zero-cached-tokens", "l1-fallbacks", "single-nic-or-tcp",
            "slow-pulls", "requests-stall"}
# The doctor's checks a tree step may name as "doctor:<check>" (the doctor's Finding.check values).
DOCTOR_CHECKS = {"agree", "stale_env", "env_drift", "coordinator", "coordinator_url", "registration", "p2p_state",
                 "peer_count", "reach", "memlock", "ucx_tls", "process", "server_http", "port_busy", "port_listening",
                 "engine", "engine_degraded", "kv_events", "lookup_leak", "stale_read_locks", "nic_pin",
                 "mooncake", "hash:builtin_fallback", "l1_misaligned", "no_transfer_channel", "server_args_clash",
                 "keep_alive", "router"}


def known_check(check: str) -> bool:
    kind, _, name = check.partition(":")
    if kind == "doctor":
        return name in DOCTOR_CHECKS
    if kind == "log":
        return name in TREE.signatures
    return check in checks.CHECKS


def test_every_required_symptom_is_there():
    assert {s.id for s in TREE.symptoms} == REQUIRED
    assert len({s.id for s in TREE.symptoms}) == len(TREE.symptoms)


@pytest.mark.parametrize("symptom", TREE.symptoms, ids=[s.id for s in TREE.symptoms])
def test_every_symptom_has_automated_checks_causes_and_fixes(symptom):
    assert symptom.title and symptom.looks_like and symptom.aliases
    assert sum(len(st.checks) for st in symptom.steps) >= 2, "a symptom needs automated checks"
    assert len({st.id for st in symptom.steps}) == len(symptom.steps)
    for st in symptom.steps:
        assert st.ask.endswith("?") and st.causes and set(st.causes) <= set(CAUSES), st.id
        assert st.checks or st.manual, f"{symptom.id}/{st.id} has neither checks nor a manual command"
        for check in st.checks:
            assert known_check(check), f"{symptom.id}/{st.id}: unknown check {check}"


def test_every_fleet_log_signature_is_used_and_is_valid_for_python_and_grep(tmp_path):
    """A signature the tree greps (one with `logs`) is named by a step, and grep -E reads it as Python does; one
    without logs is only for a failed transfer's text (the NIXL failure rules)."""
    used = {c.split(":", 1)[1] for s in TREE.symptoms for st in s.steps for c in st.checks if c.startswith("log:")}
    grepped = {k for k, sig in TREE.signatures.items() if sig.logs}
    assert used == grepped, f"unused: {grepped - used}; not grepped: {used - grepped}"
    log = tmp_path / "empty.log"
    log.write_text("nothing to see\n")
    for sig in TREE.signatures.values():
        sig.regex  # compiles
        assert set(sig.logs) <= {"server", "engine", "coordinator"} and sig.cause in CAUSES
        res = subprocess.run(["grep", "-a", "-E", "-e", sig.pattern, str(log)], capture_output=True)
        assert res.returncode == 1, f"{sig.id}: grep -E rejects {sig.pattern!r}: {res.stderr!r}"


def test_reference_page_is_generated_from_the_tree():
    page = SKILL / "references" / "decision-tree.md"
    assert page.read_text() == render.render_markdown(TREE), (
        "references/decision-tree.md is stale; regenerate it with:\n"
        "  .venv/bin/p2pctl diagnose --markdown > .claude/skills/lmcache-p2p-diagnose/references/decision-tree.md")


def test_failure_modes_reference_covers_every_signature():
    text = (SKILL / "references" / "failure-modes.md").read_text()
    for sig in TREE.signatures.values():
        # The literal text the pattern starts with, up to its first regex construct.
        first = re.split(r"\.\*|\[|\(|\?|\{", re.sub(r"\\(.)", r"\1", sig.pattern.split("|")[0]))[0].strip()
        assert first in text, f"failure-modes.md does not mention {sig.id} ({first!r})"


@pytest.mark.parametrize("text,expected", [
    ("peers not registered", "peers-not-registered"), ("Peers-Not-Registered", "peers-not-registered"),
    ("p2p_state unregistered", "peers-not-registered"), ("NIXL_ERR_BACKEND", "nixl-err-backend"),
    ("server exits with NIXL_ERR_BACKEND", "nixl-err-backend"), ("zero cached tokens", "zero-cached-tokens"),
    ("no hits", "zero-cached-tokens"), ("l1_oom", "l1-fallbacks"), ("l1_contended", "l1-fallbacks"),
    ("transfers on TCP", "single-nic-or-tcp"), ("single nic", "single-nic-or-tcp"), ("slow pulls", "slow-pulls"),
    ("requests stall", "requests-stall"), ("hang", "requests-stall"),
])
def test_find_symptom(text, expected):
    assert model.find_symptom(TREE, text).id == expected


def test_unknown_symptom_lists_the_known_ones():
    with pytest.raises(BadInput, match="Zero cached tokens"):
        model.find_symptom(TREE, "the printer is on fire")


def test_logs_only_diagnosis_finds_the_transport_signature(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "\x1b[33m[2026-11-30 01:00:00,000] LMCache WARNING:\x1b[0m starting\n"
        "[1764000000.1] [n1:42:0] ucp_context.c:1117 UCX  WARN  transports 'cuda_ipc','cuda_copy' are not available,"
        " please use one or more of: cma, posix, self, sysv, tcp\n"
        "nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND\n"
        "Authorization: Bearer PLANTEDbearer0123456789\n")
    d = walk.diagnose(TREE, model.find_symptom(TREE, "NIXL_ERR_BACKEND"), evidence.Evidence(None, TREE, (log,)))
    steps = {s.id: s for s in d.steps}
    assert steps["transport-signature"].verdict == "problem"
    assert d.likely()[0].id == "transport-signature" and d.exit_code == 1
    hits = [o for o in steps["transport-signature"].observations if o.status == "problem"]
    assert {o.check for o in hits} == {"log:nixl_err_backend", "log:ucx_transport_unavailable"}
    assert all(o.subject == str(log) for o in hits)
    assert steps["ucx-tls"].verdict == "unknown"  # no fleet: the doctor cannot run
    out = "\n".join(render.render_text(d))
    assert "likely cause (step 3" in out and "no fleet" in out
    assert json.loads(json.dumps(d.to_dict()))["likely_cause"]["step"] == "transport-signature"


def test_logs_only_clean_log_finds_nothing(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[2026-11-30 01:00:00,000] LMCache INFO: Registered with coordinator as node-a-0\n")
    d = walk.diagnose(TREE, model.find_symptom(TREE, "peers not registered"), evidence.Evidence(None, TREE, (log,)))
    assert d.exit_code == 0 and d.likely() is None
    text = "\n".join(render.render_text(d))
    assert "no cause confirmed; evidence seen: " in text and "log:registration_failed logs: " in text
    assert d.to_dict()["likely_cause"] is None and d.to_dict()["no_cause_confirmed"]["evidence_seen"]


def test_cli_list_and_markdown(p2pctl):
    code, out, _ = p2pctl("diagnose", "--list", "--json")
    assert code == 0 and {s["id"] for s in json.loads(out)} == REQUIRED
    code, out, _ = p2pctl("diagnose", "--markdown")
    assert code == 0 and out == render.render_markdown(TREE)
    code, _, err = p2pctl("diagnose", "zero cached tokens", "-f", "/nonexistent/fleet.yaml")
    assert code == 2 and "no fleet file" in err


def test_no_step_tells_a_gpu_node_to_drop_its_cuda_transport():
    """Issue 28: the slow-pulls step said "drop cuda_copy from UCX_TLS" for every node, while NIXL 1.5.1 refuses
    a UCX_TLS without a CUDA transport where GPUs are present (the doctor's ucx_tls finding already depends on
    the node). Every cause a step looks for whose fix names cuda_copy says which nodes keep or drop it."""
    named = {c for s in TREE.symptoms for st in s.steps for c in st.causes if "cuda_copy" in CAUSES[c].fix}
    assert named
    for c in named:
        assert "GPU node" in CAUSES[c].fix or "GPU-less node" in CAUSES[c].fix or "has GPUs" in CAUSES[c].means, c


def test_a_problem_that_confirms_no_reason_is_shown_but_never_named_as_the_likely_cause(tmp_path):
    """Mooncake logs 'Local segment descriptor not found' at every start: the step shows it, and the walk says no
    cause is confirmed rather than name it (its cause is not `confirmed` in the catalogue)."""
    log = tmp_path / "server.log"
    log.write_text("E20261201 mooncake: Local segment descriptor not found\n")
    d = walk.diagnose(TREE, model.find_symptom(TREE, "NIXL_ERR_BACKEND"), evidence.Evidence(None, TREE, (log,)))
    [seen] = [o for s in d.steps for o in s.observations if o.check == "log:mooncake_segment_desc"]
    assert seen.status == "problem" and seen.cause.id == "mooncake_segment_desc" and not seen.cause.confirmed
    assert d.likely() is None and d.exit_code == 0 and d.to_dict()["likely_cause"] is None
    assert any("Local segment descriptor" in s for s in d.seen())
