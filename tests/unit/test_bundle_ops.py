"""`diagnose.bundle.collect` on a 2-node fleet reached through scripted fakes: what each node's connector is
asked for, a node that cannot be reached listed under `unreachable`, and a node's log redacted in the tar."""

from __future__ import annotations

import json

from p2p_ops.diagnose import bundle
from p2p_ops.facts.logs import file_copy_fact
from p2p_ops.facts.paths import paths_fact
from tests.support.fake_connector import file_copy, like, missing_file, node_read, pid_states, unreachable
from tests.unit.test_bundle import LOG_SECRETS, assert_no_secret, unpack

PYTHON = json.dumps({"python": "3.11.7", "executable": "/v/bin/python",
                     "packages": {"lmcache": "0.5.6", "nixl-cu12": "1.5.1", "torch": "2.13.0", "vllm": None}})
REGISTERED = "[2026-11-30 02:28:00,000] LMCache INFO: Registered with coordinator as node-a-0\n"


def every_other_file_missing(root: str):
    return [like(lambda p: file_copy_fact(p, bundle.LOG_CAP_BYTES, root), missing_file(), "any other file: none"),
            like(lambda p: paths_fact({p: "file"}), "no\n", "any previous log: none")]


def test_bundle_lists_an_unreachable_node_and_redacts_a_nodes_log(fakes, tmp_path):
    fleet = fakes.fleet(2, {"node-b": [unreachable("node-b")]})
    ctx = fleet.ctx
    node_a = ctx.fleet.nodes[0]
    log = ctx.proc("server", "node-a-0").log
    fleet["node-a"].expect(
        pid_states(ctx.procs(node_a)),
        node_read(bundle.bundle_batch(ctx, node_a), {"python": PYTHON, "host_txt": "Linux node-a 6.8.0\nnode-a",
                                                     "memlock": "unlimited unlimited"}),
        file_copy(log, REGISTERED + LOG_SECRETS, bundle.LOG_CAP_BYTES, within=str(ctx.node_layout(node_a).root)),
        *every_other_file_missing(str(ctx.node_layout(node_a).root)))
    out = tmp_path / "bundle.tar.gz"
    manifest = bundle.collect(ctx, out, with_doctor=False)

    unreachable_parts = {u["what"]: u for u in manifest["unreachable"]}
    assert unreachable_parts["process states on node-b"]["error"].startswith("node-b (root@node-b:22): unreachable")
    assert unreachable_parts["facts of node node-b"]["source"] == "node-b"
    assert not [w for w in unreachable_parts if "node-b-0" in w]  # nothing more was tried on node-b
    assert manifest["processes"] == {p.name: "none" for p in ctx.procs(node_a)}

    root, on_disk = unpack(out, tmp_path / "x")
    assert on_disk["unreachable"] == manifest["unreachable"]
    assert_no_secret(root)
    server_log = (root / "nodes/node-a/node-a-0/server.log").read_text()
    assert server_log.startswith(REGISTERED) and "headers Authorization: <redacted>\n" in server_log
    kinds = {r["kind"] for r in manifest["redactions"] if r["where"] == "nodes/node-a/node-a-0/server.log"}
    assert {"bearer_token", "private_key"} <= kinds
    [entry] = [f for f in manifest["files"] if f["path"] == "nodes/node-a/node-a-0/server.log"]
    assert entry["source"] == f"node-a:{log}" and entry["redactions"] >= 4
    assert json.loads((root / "nodes/node-a/packages.json").read_text())["packages"]["lmcache"] == "0.5.6"
    assert (root / "nodes/node-a/tools/ulimit_l.txt").read_text() == "unlimited unlimited"
    missing = {u["what"] for u in manifest["unreachable"]}
    assert "fact ibv_devinfo on node-a" in missing  # a section the node's read did not answer
    assert "server /status, /config, /lmc_version, /version, /metrics of node-a-0" in missing  # stopped
