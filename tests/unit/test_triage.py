"""`p2pctl triage BUNDLE`: the doctor's judge on a bundle's captured facts, offline (issue 41, item 4). Bundles are
written by the real BundleWriter from hand-built facts (test_doctor's builders); hostile bundles by tarfile."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from p2p_ops.diagnose import doctor as D
from p2p_ops.diagnose.bundle_writer import BundleWriter
from p2p_ops.diagnose.judge.fleet import document
from p2p_ops.diagnose.triage import triage
from p2p_ops.errors import BadInput
from tests.unit.test_doctor import STATUS, env, fleet, inst

DISCONNECT = ("[2026-12-04 10:00:01,000] LMCache WARNING: Coordinator registration/heartbeat failed: Server "
              "disconnected without sending a response.")


def _chunk_size_facts() -> D.FleetFacts:
    b = inst("node-b-0", status=dict(STATUS, chunk_size=512), proc_env=env(LMCACHE_CHUNK_SIZE="512"))
    return fleet([inst("node-a-0"), b], coordinator_env={"LMCACHE_MP_COORDINATOR_CHUNK_SIZE": "256"})


def _bundle(tmp: Path, facts: D.FleetFacts | None, logs: dict[str, str] | None = None, explain: dict | None = None,
            recorded: list[str] | None = None) -> Path:
    w = BundleWriter("p2p-bundle-t-20261204T100000Z")
    if facts is not None:
        doc = document(facts, D.check(facts))
        if recorded is not None:
            doc["causes"] = [{"id": c} for c in recorded]
        w.add_json("doctor.json", {"report": doc, "facts": facts.to_dict()}, "doctor", "p2pctl doctor")
    for path, text in (logs or {}).items():
        w.add_text(path, text, "log", path)
    if explain is not None:
        w.add_json("explain.json", explain, "explain", "p2pctl explain")
    out = tmp / "b.tar.gz"
    w.write(out, {"fleet": "t", "created_utc": "20261204T100000Z"})
    return out


def test_a_bundle_gives_the_live_doctors_causes_with_the_same_ids_and_its_log_lines(tmp_path):
    facts = _chunk_size_facts()
    live = [v["id"] for v in document(facts, D.check(facts))["causes"]]
    t = triage(_bundle(tmp_path, facts, {"nodes/node-b/node-b-0/server.log": f"start\n{DISCONNECT}\n"}))
    assert [v.id for v in t.causes] == live and live[0] == "chunk_size_differs"
    assert t.causes[0].subject == "fleet" or "node-b-0" in t.causes[0].evidence[0].seen
    assert t.agrees is True and t.fleet == "t"
    # The line signs two causes: the heartbeat failed (registration_failed) and why (keepalive_short).
    assert {v.id for v in t.logs} == {"keepalive_short", "registration_failed"}
    assert all(v.subject == "node-b-0" and "server.log: " in v.evidence[0].seen for v in t.logs)
    assert any(x.startswith("explain.json:") for x in t.lacks)
    data = t.to_dict()
    assert data["likely_cause"]["id"] == "chunk_size_differs" and data["agrees_with_live_doctor"] is True


def test_a_bundle_whose_recorded_causes_differ_says_so(tmp_path):
    t = triage(_bundle(tmp_path, _chunk_size_facts(), recorded=["server_down"]))
    assert t.agrees is False
    assert any("the live doctor gave server_down" in line for line in t.lines())


def test_explains_recorded_verdict_is_read_back_with_its_filled_fix_and_unknown_ids_dropped(tmp_path):
    explain = {"nodes": [{"node": "node-b", "causes": [
        {"id": "evicted", "subject": "node-a-0", "evidence": [{"source": "chunk", "seen": "gone"}], "fix": "FILLED"},
        {"id": "no_such_cause", "subject": "x"}, "junk"]}]}
    t = triage(_bundle(tmp_path, _chunk_size_facts(), explain=explain))
    assert [(v.id, v.subject, v.fix) for v in t.explain] == [("evicted", "node-a-0", "FILLED")]


def test_a_bundle_taken_without_the_doctor_says_what_it_lacks(tmp_path, p2pctl):
    path = _bundle(tmp_path, None)
    t = triage(path)
    assert t.causes == [] and t.agrees is None
    assert any(x.startswith("doctor.json:") for x in t.lacks) and any("server.log" in x for x in t.lacks)
    code, out, err = p2pctl("triage", str(path), "--json")
    assert code == 0 and json.loads(out)["likely_cause"] is None, err


def test_the_cli_exits_1_with_causes_and_needs_no_fleet(tmp_path, p2pctl, monkeypatch):
    monkeypatch.chdir(tmp_path)          # no fleet.yaml here
    code, out, err = p2pctl("triage", str(_bundle(tmp_path, _chunk_size_facts())))
    assert code == 1, err
    assert "1. chunk_size_differs" in out and "same causes as the live doctor gave" in out


def _tar(tmp: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    out = tmp / "h.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out


def _reg(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


@pytest.mark.parametrize("build,message", [
    (lambda p: p.write_bytes(b"not a tar at all"), "not a bundle p2pctl wrote (cannot read it as tar.gz"),
    (lambda p: _tar(p.parent, [_reg("r/doctor.json", b"{}")]).replace(p), "no manifest.json at its root"),
    (lambda p: _tar(p.parent, [_reg("r/manifest.json", b"{nope")]).replace(p), "manifest.json in the bundle: is not valid JSON"),
    (lambda p: _tar(p.parent, [_reg("r/manifest.json", b"[" * 100_000)]).replace(p),
     "manifest.json in the bundle: JSON nested deeper than"),
    (lambda p: _tar(p.parent, [_reg("r/manifest.json", b"{}"), _reg("r/doctor.json", json.dumps(
        {"facts": {"fleet": "t", "runtime": "x", "coordinator_url": "u", "coordinator_node": "n",
                   "nodes": [{"node": "n", "address": "a", "listeners": [{"address": "a", "port": "x"}]}]}}
    ).encode())]).replace(p), "does not hold the doctor's facts at facts.nodes.0.listeners.0.port"),
    (lambda p: _tar(p.parent, [_reg("r/manifest.json", b"{}"), _reg("r/doctor.json", b"[1]")]).replace(p),
     "the bundle was taken with --no-doctor"),
])
def test_a_hostile_or_foreign_file_is_one_line_naming_what_is_wrong(tmp_path, p2pctl, build, message):
    path = tmp_path / "x.tar.gz"
    build(path)
    if "--no-doctor" in message:          # a doctor.json that is not an object holds no facts: said, not fatal
        assert any(message in x for x in triage(path).lacks)
        return
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(".", r"\.")):
        triage(path)
    code, out, err = p2pctl("triage", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_links_absolute_and_parent_paths_are_never_read(tmp_path):
    link = tarfile.TarInfo("r/nodes/n/i/server.log")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    path = _tar(tmp_path, [_reg("r/manifest.json", b'{"fleet": "t"}'), (link, b""),
                           _reg("r/../nodes/n/j/server.log", DISCONNECT.encode()),
                           _reg("/abs/nodes/n/k/server.log", DISCONNECT.encode())])
    t = triage(path)
    assert t.logs == [] and any("no server.log" in x for x in t.lacks)


def test_a_signature_quoted_in_an_http_access_line_is_no_evidence():
    """Anyone who can reach a server's port writes its access log: the request they quote signs nothing (issue 44
    item 1), while the program's own line still does."""
    from p2p_ops.diagnose.signatures import SIGNATURES
    from p2p_ops.diagnose.triage import _log_verdicts

    access = ('INFO:     127.0.0.1:5555 - "GET /Traceback%20(most%20recent%20call%20last)?x=Traceback (most recent '
              'call last) HTTP/1.1" 404 Not Found')
    evicted = 'INFO:     127.0.0.1:5556 - "PUT /instances/node-a-0 timed out; evicted HTTP/1.1" 404 Not Found'
    real = "[2026-12-06 13:43:01,284] LMCache WARNING: Instance node-b-0 heartbeat timed out; evicted"
    assert not SIGNATURES["traceback"].search(access) and SIGNATURES["traceback"].regex.search(access)
    assert not SIGNATURES["instance_evicted"].search(evicted) and SIGNATURES["instance_evicted"].search(real)
    logs = {"bundle/coordinator/coordinator.log": f"{access}\n{evicted}\n".encode()}
    assert _log_verdicts(logs) == []
    logs["bundle/coordinator/coordinator.log"] += f"{real}\n".encode()
    assert [v.id for v in _log_verdicts(logs)] == ["instance_evicted"]
