"""NIXL log lines: C++ core (glog and condensed), Python layer, vLLM lines and exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.facts.ucx_log import parse_nixl_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "nixl"


@pytest.mark.parametrize("line,source,level,file", [
    ("I1130 02:12:50.336568   12531 config.cpp:69] Modified UCX config: RNDV_THRESH=inf", "core", "INFO",
     "config.cpp"),
    ("E1130 02:10:21.101008   10371 nixl_agent.cpp:342] createBackend: backend creation failed for 'UCX'", "core",
     "ERROR", "nixl_agent.cpp"),
    ("E [nixl_agent.cpp:484] registerMem: registration failed for the specified or all potential backends", "core",
     "ERROR", "nixl_agent.cpp"),
    ("2026-11-30 02:12:46 NIXL INFO    _api.py:281 Initialized NIXL agent: solo", "python", "INFO", "_api.py"),
    ("INFO 05-01 17:58:04 [nixl_utils.py:32] NIXL is available", "vllm", "INFO", "nixl_utils.py"),
    ("(EngineCore_0 pid=2211) ERROR 05-01 18:02:11 [nixl_connector.py:1710] NIXL transfer failure: x", "vllm",
     "ERROR", "nixl_connector.py"),
    ("nixl_cu12._bindings.nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT", "exception", "ERROR", ""),
])
def test_line_forms(line, source, level, file):
    parsed = parse_nixl_line(line)
    assert (parsed.source, parsed.level, parsed.file) == (source, level, file)


def test_structured_fields():
    modified = parse_nixl_line("I1130 02:12:50.336568   12531 config.cpp:69] Modified UCX config: RNDV_THRESH=inf")
    assert modified.modified_ucx_config == ("RNDV_THRESH", "inf") and modified.tid == 12531
    exc = parse_nixl_line("nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND")
    assert exc.exception == ("nixlBackendError", "NIXL_ERR_BACKEND")


def test_unrelated_lines_are_skipped():
    assert parse_nixl_line("WARNING 05-01 18:02:12 [scheduler.py:120] unrelated vLLM warning") is None
    assert parse_nixl_line("[1796004766.362651] [vm:12466:0] ucp_context.c:2753 UCX  INFO  Version 1.23.0") is None


def test_debug_startup_log_is_fully_recognised():
    lines = (FIX / "agent_nixl_debug.log").read_text().splitlines()
    nixl_lines = [line for line in lines if not line.startswith("[")]  # the rest are UCX lines
    nixl = [parse_nixl_line(line) for line in nixl_lines]
    assert all(nixl), [line for line, p in zip(nixl_lines, nixl, strict=True) if p is None]
    modified = dict(p.modified_ucx_config for p in nixl if p.modified_ucx_config)
    assert modified["RNDV_THRESH"] == "inf" and "MAX_RMA_RAILS" not in modified  # user's own setting kept
