"""Reproduce the field failures on a real local fleet and check that doctor, diagnose and bundle find them.

One fleet for the whole module (CPU is scarce): env.sh hand-edited to hash_algorithm builtin (validate refuses it
without vLLM, so an operator's edit is the way such a fleet happens) and node-b-0 hand-edited to
PYTHONHASHSEED=4242, its env.sh also carrying planted credentials. Zero cached tokens; the doctor and diagnose
name the mismatch; a bundle of it holds no secret. The coordinator scenarios are in test_diagnose_coordinator.py
(their own module, so the two fleets never run at the same time).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from p2p_ops.errors import CouldNotRun
from p2p_ops.harness.basic import run_basic
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.settings import Settings
from tests.conftest import write_local_fleet
from tests.unit.test_bundle import MARKER, PEM, SECRETS, assert_no_secret, plant_env, unpack

pytestmark = pytest.mark.e2e


def edit_env(env: Path, key: str, value: str) -> None:
    text, n = re.subn(rf"^export {key}=.*$", f"export {key}={value}", env.read_text(), flags=re.M)
    assert n == 1, key
    env.write_text(text)


def start_edited(tmp: Path, name: str, edit, settings: dict | None = None, wait: bool = True):
    """Render, hand-edit, start (rerender=False). Free ports are picked when the spec is written; another
    process on this shared box can take one before the server binds it, so that case is retried (bounded)."""
    overrides = {"settings": {**Settings(server_nice=10).model_dump(), **settings}} if settings else {}
    for attempt in range(3):
        ctx = FleetContext.load(write_local_fleet(tmp / "fleet.yaml", 2, name=name, **overrides))
        try:
            launch.render(ctx)
            edit(ctx)
            launch.up(ctx, rerender=False)
            if wait:
                launch.wait(ctx, timeout=90)
            return ctx
        except CouldNotRun as exc:
            launch.down(ctx)
            ctx.close()
            if "address already in use" not in str(exc) or attempt == 2:
                raise
        except BaseException:
            launch.down(ctx)
            ctx.close()
            raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    def edit(ctx):
        for unit in ("node-a-0", "node-b-0"):
            edit_env(ctx.layout.env(unit), "LMCACHE_HASH_ALGORITHM", "builtin")
        edit_env(ctx.layout.env("coordinator"), "LMCACHE_MP_COORDINATOR_HASH_ALGORITHM", "builtin")
        env = ctx.layout.env("node-b-0")
        edit_env(env, "PYTHONHASHSEED", "4242")
        plant_env(env)

    ctx = start_edited(tmp_path_factory.mktemp("mismatched"), "mismatch", edit, {"server_nice": 10})
    try:
        yield ctx
    finally:
        launch.down(ctx)
        ctx.close()


def _findings(out: str, check: str) -> list[dict]:
    return [f for f in json.loads(out)["findings"] if f["check"] == check]


def test_different_pythonhashseed_shares_nothing_and_doctor_names_it(mismatched, p2pctl):
    result = run_basic(mismatched, chunks=4, max_tokens=4)
    assert not result.passed
    assert result.numbers["cached_tokens_b"] == 0 and result.numbers["p2p_loads_b"] == 0
    # explain on node-b-0 names the key input that sets it apart from its peers: its seed
    assert result.cause is not None and result.cause.id == "hash_seed_differs", (result.cause, result.likely_cause)
    assert "PYTHONHASHSEED" in result.likely_cause, result.likely_cause

    code, out, err = p2pctl("doctor", "-f", str(mismatched.fleet_file), "--json")
    assert code == 1, err
    [seed] = _findings(out, "agree:PYTHONHASHSEED")
    assert seed["severity"] == "error" and seed["subject"] == "node-a-0, node-b-0"
    assert seed["value"] == "node-a-0=0, node-b-0=4242" and "(read from process)" in seed["message"]
    assert "PYTHONHASHSEED=0" in seed["fix"] and "--node node-b --role server" in seed["fix"]  # the one-server fix
    assert seed["cause"]["id"] == "hash_seed_differs" and seed["cause"]["fix"] == seed["fix"]
    [none_hash] = _findings(out, "agree:NONE_HASH")  # the servers' own evidence, from their logs
    assert none_hash["subject"] == "node-a-0, node-b-0"
    [fallback] = _findings(out, "hash:builtin_fallback")  # LMCache's "Could not load 'builtin'" line
    assert fallback["subject"] == "node-a-0, node-b-0" and "blake3" in fallback["fix"]
    assert fallback["cause"]["id"] == "builtin_hash" and json.loads(out)["causes"][0]["id"] == "hash_seed_differs"
    assert not _findings(out, "coordinator") and not _findings(out, "p2p_state")
    assert MARKER not in out  # the planted credentials in env.sh never reach the doctor's output

    code, out, _ = p2pctl("diagnose", "zero cached tokens", "-f", str(mismatched.fleet_file), "--json")
    diag = json.loads(out)
    assert code == 1 and diag["likely_cause"]["step"] == "settings-agree"
    assert diag["likely_cause"]["cause"]["id"] == "hash_seed_differs"
    # the peers' disagreement, and each env.sh the seed was planted in (env_drift: the same cause, by node)
    assert "node-a-0, node-b-0" in diag["likely_cause"]["subjects"]
    assert set(diag["likely_cause"]["subjects"]) <= {"node-a-0, node-b-0", "node-a-0", "node-b-0"}
    assert {s["id"]: s["verdict"] for s in diag["steps"]}["registered"] == "ok"


def _plant_in_running_log(ctx) -> None:
    """Secrets in node-b-0's server.log: two written by the server itself (uvicorn logs the request line with its
    query string), and an AWS key plus a PEM block appended by hand. The server writes at its own file offset
    and may overwrite the appended lines before the bundle reads them; the test then plants again."""
    node, inst = ctx.fleet.instance("node-b-0")
    url = ctx.server_url(node, inst)
    requests.get(f"{url}/status", params={"hf_token": SECRETS["HF_TOKEN"], "api_key": SECRETS["OPENAI_API_KEY"]},
                 timeout=5)
    with Path(ctx.proc("server", inst).log).open("a") as f:
        f.write(f"export AWS_SECRET_ACCESS_KEY={SECRETS['AWS_SECRET_ACCESS_KEY']}\n{PEM}\n")


def test_bundle_of_a_running_fleet_contains_no_planted_secret(mismatched, p2pctl, tmp_path):
    log_in_bundle = "nodes/node-b/node-b-0/server.log"
    planted_kinds = {"huggingface_token", "openai_key", "secret_assignment", "private_key"}
    for attempt in range(3):
        _plant_in_running_log(mismatched)
        out = tmp_path / f"bundle-{attempt}.tar.gz"
        code, stdout, err = p2pctl("bundle", "-f", str(mismatched.fleet_file), "-o", str(out), "--json")
        assert code == 0, err
        root, manifest = unpack(out, tmp_path / f"x{attempt}")
        kinds = {r["kind"] for r in manifest["redactions"] if r["where"] == log_in_bundle}
        if planted_kinds <= kinds:
            break  # every planted secret was in the log when the bundle read it
    else:
        pytest.fail(f"the planted log lines never reached the bundle intact (kinds seen: {kinds})")
    assert_no_secret(root)
    assert MARKER not in stdout
    env_kinds = {r["kind"] for r in manifest["redactions"] if r["where"] == "nodes/node-b/node-b-0/env.sh"}
    assert {"huggingface_token", "openai_key", "aws_access_key_id", "secret_assignment", "private_key"} <= env_kinds
    log_text = (root / log_in_bundle).read_text()
    assert "AWS_SECRET_ACCESS_KEY=<redacted>" in log_text and "-----BEGIN RSA PRIVATE KEY-----" in log_text
    paths = {f["path"] for f in manifest["files"]}
    assert {"coordinator/instances.json", "nodes/node-a/node-a-0/status.json", "nodes/node-b/node-b-0/config.json",
            "nodes/node-b/node-b-0/server_metrics.txt", "nodes/node-a/packages.json", "doctor.txt"} <= paths
    assert manifest["doctor"]["exit_code"] == 1
    assert "PYTHONHASHSEED differs" in (root / "doctor.txt").read_text()
