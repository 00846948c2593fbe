"""`p2pctl doctor` on a stopped fleet: env.sh agreement and free ports, read through the local connector
(no lmcache process is started)."""

from __future__ import annotations

import json
import re
import socket

import pytest

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.settings import Settings
from tests.conftest import write_local_fleet


def _edit(ctx, instance: str, key: str, value: str) -> None:
    env = ctx.layout.env(instance)
    text, n = re.subn(rf"^export {key}=.*$", f"export {key}={value}", env.read_text(), flags=re.M)
    assert n == 1
    env.write_text(text)


@pytest.fixture
def rendered(tmp_path):
    def make(**settings):
        overrides = {"settings": {**Settings(server_nice=10).model_dump(), **settings}} if settings else {}
        ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="pre", **overrides))
        launch.render(ctx)
        return ctx
    return make


def test_unrendered_fleet_compares_the_spec(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="fresh")
    code, out, err = p2pctl("doctor", "-f", str(fleet), "--json")
    report = json.loads(out)
    assert code == 0, err
    assert report["facts"]["mode"].startswith("stopped")
    assert {f["check"] for f in report["findings"]} == {"env_file", "ports"}


def test_rendered_fleet_is_healthy_then_a_busy_port_is_named(rendered, p2pctl):
    ctx = rendered()
    code, out, _ = p2pctl("doctor", "-f", str(ctx.fleet_file))
    assert code == 0 and "every planned port is free" in out and "result: healthy" in out
    _, inst = ctx.fleet.instance("node-b-0")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", inst.ports.http))
        s.listen(1)
        code, out, _ = p2pctl("doctor", "-f", str(ctx.fleet_file), "--json")
    busy = [f for f in json.loads(out)["findings"] if f["check"] == "port_busy"]
    assert code == 1 and len(busy) == 1
    assert busy[0]["subject"] == "node-b-0 http" and str(inst.ports.http) in busy[0]["value"]


def test_hand_edited_pythonhashseed_with_blake3_is_a_warning(rendered, p2pctl):
    ctx = rendered()
    _edit(ctx, "node-b-0", "PYTHONHASHSEED", "4242")
    code, out, _ = p2pctl("doctor", "-f", str(ctx.fleet_file), "--json")
    [f] = [f for f in json.loads(out)["findings"] if f["check"] == "agree:PYTHONHASHSEED"]
    assert code == 1 and f["severity"] == "warn"
    assert f["value"] == "node-a-0=0, node-b-0=4242" and "env.sh" in f["message"]
    assert "every instance hashes with blake3" in f["message"]


def test_hand_edited_pythonhashseed_with_builtin_hash_is_an_error(rendered, p2pctl):
    ctx = rendered()  # validate refuses builtin without vLLM: this is an operator's hand edit of env.sh
    for unit in ("node-a-0", "node-b-0"):
        _edit(ctx, unit, "LMCACHE_HASH_ALGORITHM", "builtin")
    _edit(ctx, "node-b-0", "PYTHONHASHSEED", "4242")
    _edit(ctx, "node-a-0", "LMCACHE_L1_ALIGN_BYTES", "4096")
    code, out, _ = p2pctl("doctor", "-f", str(ctx.fleet_file))
    assert code == 1
    assert "[ERROR] node-a-0, node-b-0: PYTHONHASHSEED differs across peers" in out
    assert "(seen: node-a-0=0, node-b-0=4242)" in out
    assert "l1_align_bytes differs across peers" in out and "node-a-0=4096, node-b-0=65536" in out
