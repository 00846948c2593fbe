"""NIXL/UCX failure -> the catalogue's cause, on the exception text plus log evidence (the signature that matched
names it; the line it matched is the evidence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_ops.diagnose.nixl.failures import classify
from p2p_ops.diagnose.nixl.probe import explain_failure
from p2p_ops.facts.ucx_trace import parse_traces

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


@pytest.mark.parametrize("text,cause,seen", [
    ("nixlBackendError: NIXL_ERR_BACKEND\nucx WARN: transports 'cuda_ipc','cuda_copy' are not available, please "
     "use one or more of: cma, mm, posix, self, shm, sm, sysv, tcp", "tls_unavailable", "'cuda_ipc','cuda_copy'"),
    ("nixlBackendError: NIXL_ERR_BACKEND\nucx WARN: network device 'mlx5_0:1' is not available, please use one or "
     "more of: 'eth0'(tcp), 'lo'(tcp)\nucx ERROR: no active messages transport to <no debug data>",
     "net_device_unavailable", "mlx5_0:1"),
    ("Invalid UCX_TLS=rc,sm,self for NIXL UCX backend: NVIDIA GPU(s) are present, but ...", "tls_without_cuda",
     "UCX_TLS=rc,sm,self"),
    ("nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT", "remote_disconnect", "NIXL_ERR_REMOTE_DISCONNECT"),
    ("ucx ERROR: ibv_create_cq(cqe=4096) failed: Cannot allocate memory", "memlock", "ibv_create_cq"),
    ("ucx FATAL: Transport retry count exceeded on mlx5_0:1/RoCE", "transport_retry", "mlx5_0:1/RoCE"),
    ("TimeoutError: timed out waiting for target.meta from the target agent", "transfer_timeout", "target.meta"),
    ("ValueError: data mismatch: 12 of 100 bytes differ after the READ", "read_mismatch", "12 of 100"),
    ("ModuleNotFoundError: No module named 'nixl'", "nixl_missing", "No module named"),
    ("nixlBackendError: NIXL_ERR_BACKEND", "ucx_backend_failed", "NIXL_ERR_BACKEND"),
])
def test_rules(text, cause, seen):
    v = classify(text)
    assert v.id == cause and v.fix and seen in v.evidence[0].seen and v.evidence[0].source.startswith("log:")


def test_a_failure_no_rule_recognises_names_no_cause():
    assert classify("SomethingElse: odd") is None


def test_probe_failure_from_captured_run_blames_the_target_that_failed_first():
    state = json.loads((FIX / "nixl" / "probe_tls_rc_initiator.json").read_text())
    trace = parse_traces([("initiator.log", (FIX / "nixl" / "probe_tls_rc_initiator.log").read_text())])
    target = dict(state, role="target")
    failure = explain_failure({"target": target, "initiator": state}, trace)
    assert (failure.side, failure.stage, failure.exc_class) == ("target", "create_agent", "nixlBackendError")
    assert failure.cause.id == "tls_unavailable" and "'rc'" in failure.cause.evidence[0].seen
    assert failure.cause.subject == "the target" and "UCX_TLS" in failure.cause.fix
    assert any("transport 'rc' is not available" in e for e in failure.evidence)


def test_probe_failure_initiator_timeout_while_target_serves():
    trace = parse_traces([])
    failure = explain_failure({"target": {"ok": False, "stage": "serve"},
                        "initiator": {"ok": False, "stage": "transfer", "exc_class": "TimeoutError",
                                      "message": "timed out waiting for the READ to complete (state PROC)"}}, trace)
    assert failure.side == "initiator" and failure.cause.id == "transfer_timeout"
