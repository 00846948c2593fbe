"""Debug bundle: redaction before writing, the manifest, and a bundle of a stopped fleet (no processes)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from p2p_ops.diagnose import bundle
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

PEM_BODY = ("MIIEowIBAAKCAQEAPLANTEDxk3Jq1yDqkzV0qY7m6bN3bH8v5JbQmGm7Pq0kA2xQ\n"
            "PLANTEDzGv9mXQy2xj7dWk4KZsH1cF8u3e0r5pT6aB2nC9dE1fG3hI5jK7lM9nP")
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
SECRETS = {
    "HF_TOKEN": "hf_PLANTEDaaaaBBBBccccDDDDeeeeFFFF1234",
    "OPENAI_API_KEY": "sk-PLANTEDabcdefghijklmnopqrstuvwxyz012345",
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED000000000",
    "AWS_SECRET_ACCESS_KEY": "PLANTEDwJalrXUtnFEMI/K7MDENG/bPxRfiCY",
}
MARKER = "PLANTED"


def plant_env(env_sh: Path) -> None:
    """Append credentials to an env.sh (valid bash: the server still starts from it)."""
    lines = [f"export {k}={v}" for k, v in SECRETS.items()] + [f'export SSH_PRIVATE_KEY="{PEM}"']
    env_sh.write_text(env_sh.read_text() + "\n".join(lines) + "\n")


# Log lines that carry credentials, as a server may print them.
LOG_SECRETS = ("[2026-11-30 02:28:01,789] LMCache INFO: headers Authorization: Bearer PLANTEDbearer0123456789ab\n"
               f"[2026-11-30 02:28:01,790] LMCache WARNING: env OPENAI_API_KEY={SECRETS['OPENAI_API_KEY']}\n"
               f"aws_secret_access_key = {SECRETS['AWS_SECRET_ACCESS_KEY']}\n"
               f"token {SECRETS['HF_TOKEN']} used\n{PEM}\n")


def plant_log(log: Path) -> None:
    with log.open("a") as f:
        f.write(LOG_SECRETS)


def unpack(path: Path, dest: Path) -> tuple[Path, dict]:
    with tarfile.open(path) as tar:
        names = tar.getnames()
        assert all(MARKER not in n for n in names)
        tar.extractall(dest, filter="data")
    [root] = [p for p in dest.iterdir() if p.is_dir()]
    return root, json.loads((root / "manifest.json").read_text())


def assert_no_secret(root: Path) -> None:
    """Grep every file of the unpacked bundle for every planted value (and the marker they all carry)."""
    needles = [*SECRETS.values(), *PEM_BODY.splitlines(), MARKER]
    for f in root.rglob("*"):
        if f.is_file():
            text = f.read_bytes().decode("utf-8", errors="replace")
            leaked = [n for n in needles if n in text]
            assert not leaked, f"{f.relative_to(root)} still contains {leaked}"


def test_writer_redacts_in_memory_and_lists_each_redaction(tmp_path):
    w = bundle.BundleWriter("b")
    w.add_text("nodes/a/env.sh", "export PYTHONHASHSEED=0\n" + "\n".join(f"export {k}={v}" for k, v in
                                                                         SECRETS.items()) + "\n", "env", "a:/x")
    w.add_json("status.json", {"p2p_state": "registered", "password": "PLANTEDpw"}, "status", "http://x/status")
    w.missing("metrics", "http://x/metrics", f"refused (token {SECRETS['HF_TOKEN']})")
    manifest = w.write(tmp_path / "b.tar.gz", {"fleet": "t"})
    root, on_disk = unpack(tmp_path / "b.tar.gz", tmp_path / "x")
    assert_no_secret(root)
    assert on_disk == manifest and (root / "nodes/a/env.sh").read_text().startswith("export PYTHONHASHSEED=0\n")
    entries = {(r["where"], r.get("name")) for r in manifest["redactions"]}
    assert {("nodes/a/env.sh", k) for k in SECRETS} | {("status.json", "password")} <= entries
    assert all(isinstance(r["line"], int) and r["kind"] for r in manifest["redactions"])
    [env_entry] = [f for f in manifest["files"] if f["path"] == "nodes/a/env.sh"]
    assert env_entry["redactions"] == 4 and env_entry["source"] == "a:/x" and env_entry["bytes"] > 0
    assert manifest["redaction_summary"]["total"] == 5 and manifest["unreachable"][0]["what"] == "metrics"
    assert (tmp_path / "b.tar.gz").stat().st_mode & 0o777 == 0o600


def test_a_log_cut_inside_a_key_block_loses_the_key_material():
    cut = "UTAGE\n" + PEM_BODY + "\n-----END RSA PRIVATE KEY-----\nINFO: next line\n"
    assert bundle.trim_partial_head(cut) == "-----END RSA PRIVATE KEY-----\nINFO: next line\n"


def test_read_remote_caps_and_strips_colours(tmp_path):
    from p2p_ops.connectors import LocalConnector

    log = tmp_path / "server.log"
    log.write_text("\x1b[32mfirst line\x1b[0m\n" + "x" * 50 + "\nlast line\n")
    text, size, err = bundle.read_remote(LocalConnector(), str(log))
    assert err == "" and text.startswith("first line\n") and size == log.stat().st_size
    text, size, _ = bundle.read_remote(LocalConnector(), str(log), cap=20)
    assert text == "last line\n"
    assert bundle.read_remote(LocalConnector(), str(tmp_path / "nope"))[0] is None


def test_bundle_of_a_stopped_fleet_with_planted_secrets(tmp_path, p2pctl):
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="stopped"))
    launch.render(ctx)
    plant_env(ctx.layout.env("node-b-0"))
    log = ctx.layout.log("node-b-0", "server")
    log.write_text("[2026-11-30 02:28:00,000] LMCache INFO: Registered with coordinator as node-b-0\n")
    plant_log(log)
    out = tmp_path / "bundle.tar.gz"
    code, stdout, err = p2pctl("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--json")
    assert code == 0, err
    assert MARKER not in stdout
    root, manifest = unpack(out, tmp_path / "x")
    assert_no_secret(root)
    paths = {f["path"] for f in manifest["files"]}
    assert {"fleet.yaml", "coordinator/env.sh", "nodes/node-b/node-b-0/env.sh", "nodes/node-b/node-b-0/server.log",
            "nodes/node-a/packages.json", "doctor.json", "doctor.txt", "nodes/node-a/tools/ulimit_l.txt"} <= paths
    red = {(r["where"], r["kind"]) for r in manifest["redactions"]}
    assert ("nodes/node-b/node-b-0/env.sh", "huggingface_token") in red
    assert ("nodes/node-b/node-b-0/env.sh", "private_key") in red
    assert {k for w, k in red if w == "nodes/node-b/node-b-0/server.log"} >= {"bearer_token", "private_key"}
    unreachable = {u["what"] for u in manifest["unreachable"]}
    assert "server /status, /config, /lmc_version, /version, /metrics of node-a-0" in unreachable
    assert "coordinator /healthz, /instances, /metrics" in unreachable
    assert all(s == "none" for s in manifest["processes"].values())
    # The planted lines make node-b-0's env.sh differ from the render: the doctor names the drift (redacted above).
    doctor = json.loads((root / "doctor.json").read_text())
    assert manifest["doctor"]["exit_code"] == 1
    assert manifest["doctor"]["likely_cause"].startswith("node-b-0: ")    # the one judge's, as doctor gives it
    assert {(f["check"], f["subject"]) for f in doctor["report"]["findings"] if f["severity"] != "info"} == {
        ("env_drift", "node-b-0")}
    pkgs = json.loads((root / "nodes/node-a/packages.json").read_text())["packages"]
    assert pkgs["lmcache"] and "torch" in pkgs and "vllm" in pkgs
    env_b = (root / "nodes/node-b/node-b-0/env.sh").read_text()
    assert "export PYTHONHASHSEED=0" in env_b and "export HF_TOKEN=<redacted>" in env_b
    assert "export P2P_ENGINE_PREFILL_US_PER_TOKEN=0.0" in env_b  # a per-token rate is not a credential


def test_bundle_does_not_overwrite_without_force(tmp_path, p2pctl):
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="noclobber"))
    launch.render(ctx)
    out = tmp_path / "bundle.tar.gz"
    out.write_text("precious")
    code, _, err = p2pctl("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--no-doctor")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--force" in err, err
    assert out.read_text() == "precious"
    code, _, err = p2pctl("bundle", "-f", str(ctx.fleet_file), "-o", str(out), "--no-doctor", "--force")
    assert code == 0, err
    assert tarfile.is_tarfile(out) and out.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".bundle.tar.gz.*"))  # no temp file left behind
