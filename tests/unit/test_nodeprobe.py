"""Node probe: each parser from captured output, the probe script on this machine and on fixture trees,
the verdict rules, bootstrap's steps, `p2pctl probe` on a local fleet, and probing (and bootstrapping)
through scripted fake connectors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from p2p_ops.connectors import LocalConnector
from p2p_ops.facts import parse_host, sections
from p2p_ops.facts.base import ABSENT
from p2p_ops.facts.gpus import Gpu, parse_gpus
from p2p_ops.facts.ib_model import IbDevice
from p2p_ops.facts.limits import Memlock, parse_ulimit_l
from p2p_ops.facts.listeners import Listener, parse_listeners
from p2p_ops.facts.python_env import PythonEnv, parse_python
from p2p_ops.facts.storage import Disk, ModelCache, hf_cache_dir_name, parse_df, parse_model_cache
from p2p_ops.facts.sysfs_ib import SYSFS_IB_GREP, parse_sysfs_ib_grep
from p2p_ops.lifecycle.preflight.bootstrap import bootstrap_script, pip_steps
from p2p_ops.facts import node_facts
from p2p_ops.lifecycle.preflight.probe import (
    PROBE,
    NodeProbe,
    PortCheck,
    check_ports,
    fill,
    node_python,
    planned_ports,
    probe_fleet,
)
from p2p_ops.lifecycle.preflight.readiness import assess_fleet, assess_node
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet
from tests.conftest import write_local_fleet
from tests.support.fake_connector import cli_through, exactly, expect, node_read, pid_states, unreachable

RDMA_TREES = Path(__file__).resolve().parent.parent / "fixtures" / "diagnose" / "rdma"

NVIDIA_SMI = """\
0, NVIDIA H100 80GB HBM3, 81559, 1, 550.54.15, 00000000:18:00.0
1, NVIDIA H100 80GB HBM3, 81559, 70123, 550.54.15, 00000000:2A:00.0
"""

SS = """\
LISTEN 0      4096       127.0.0.1:8081       0.0.0.0:*    users:(("lmcache",pid=4121,fd=18))
LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=911,fd=3))
LISTEN 0      511     127.0.0.53%lo:53         0.0.0.0:*
LISTEN 0      100             [::]:9300          [::]:*    users:(("python3",pid=77,fd=6))
"""

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 115810 1 0
   1: 0100007F:D431 0100007F:1F91 01 00000000:00000000 00:00000000 00000000     0        0 115811 1 0
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000000000000:2454 00000000000000000000000000000000:0000 0A 00000000:00000000
"""

DF = """\
Filesystem     1024-blocks     Used Available Capacity Mounted on
/dev/nvme0n1p2   937367304 25348084  81042828      24% /srv
"""


# ---- parsers ------------------------------------------------------------------------------------------

def test_sections_split_with_their_exit_codes():
    out = "noise\n@@p2p-section a\nx\ny\n\n@@p2p-rc 0\n\n@@p2p-section b\nz\n@@p2p-rc 127\n@@p2p-section c\ncut"
    secs = sections.parse_sections(out)
    assert secs["a"] == (0, "x\ny") and secs["b"] == (127, "z") and secs["c"][0] == -1


def test_gpus_from_nvidia_smi_csv_and_absent():
    gpus = parse_gpus(NVIDIA_SMI)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1] == Gpu(1, "NVIDIA H100 80GB HBM3", 81559, 70123, "550.54.15", "00000000:2A:00.0")
    assert parse_gpus(ABSENT) is None
    assert parse_gpus("No devices were found") == []
    assert parse_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") == []


def _rdma_section_on(tree: Path) -> str:
    """Run the probe's own rdma command against a fixture tree, reporting paths as on a live host."""
    real = SYSFS_IB_GREP.replace("/sys/class/infiniband", f"{tree}/sys/class/infiniband")
    out = subprocess.run(["bash", "-c", real], capture_output=True, text=True, check=True).stdout
    return out.replace(str(tree), "")


def test_rdma_devices_with_numa_ports_and_netdevs_from_a_roce_tree():
    devs = parse_sysfs_ib_grep(_rdma_section_on(RDMA_TREES / "roce_healthy"))
    assert [(d.name, d.numa_node, d.netdevs) for d in devs] == [
        ("rocep193s0f0", 1, ["ens9f0np0"]), ("rocep65s0f0", 0, ["ens1f0np0"])]
    port = devs[0].port(1)
    assert (port.state, port.link_layer, port.rate) == ("ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)")


def test_rdma_from_an_infiniband_tree_and_from_a_host_without_rdma():
    devs = parse_sysfs_ib_grep(_rdma_section_on(RDMA_TREES / "ib_healthy"))
    assert len(devs) >= 4 and all(d.port(1).link_layer == "InfiniBand" for d in devs)
    assert {d.numa_node for d in devs} <= {0, 1}
    assert parse_sysfs_ib_grep(_rdma_section_on(RDMA_TREES / "no_rdma")) == []


def test_listeners_from_ss_and_from_proc_net_tcp():
    ls = parse_listeners(SS)
    assert Listener("127.0.0.1", 8081, "lmcache", 4121) in ls
    assert Listener("127.0.0.53", 53) in ls
    assert [x.wildcard for x in ls] == [False, True, False, True]
    raw = parse_listeners(PROC_NET_TCP)
    assert raw == [Listener("127.0.0.1", 8081), Listener("::", 9300)]


def test_disk_memlock_model_cache_host():
    assert parse_df(DF) == Disk("/srv", 937367304 * 1024, 81042828 * 1024)
    assert parse_df("df: /nope: No such file or directory") is None
    assert parse_ulimit_l("8192 unlimited") == Memlock(8192 * 1024, None, "ulimit -l")
    assert parse_ulimit_l("unlimited unlimited").unlimited
    assert parse_ulimit_l("bash: ulimit: error").error
    mc = parse_model_cache("present /r/.cache/huggingface/hub/models--Qwen--Qwen3-8B\nabc123\ndef456")
    assert mc == ModelCache(True, "/r/.cache/huggingface/hub/models--Qwen--Qwen3-8B", ("abc123", "def456"))
    assert parse_model_cache("absent /x").present is False and parse_model_cache(ABSENT) is None
    assert parse_host("gpu-node-3\n6.8.0-45-generic") == {"hostname": "gpu-node-3", "kernel": "6.8.0-45-generic"}
    assert hf_cache_dir_name("Qwen/Qwen3-8B") == "models--Qwen--Qwen3-8B"


def test_python_versions_or_missing_interpreter():
    env = parse_python('warning first\n{"python": "3.11.7", "executable": "/v/bin/python", '
                         '"packages": {"lmcache": "0.5.6", "vllm": null, "nixl": "1.5.1"}}')
    assert env.present and env.version == "3.11.7" and env.packages["lmcache"] == "0.5.6"
    missing = parse_python("missing /opt/p2p/.venv/bin/python")
    assert not missing.present and "/opt/p2p/.venv/bin/python" in missing.error
    assert not parse_python("Traceback (most recent call last):\n...").present


# ---- the probe on this machine ------------------------------------------------------------------------

def fleet2(**changes):
    data = local_fleet(2, name="pr")
    data.update(changes)
    return parse_fleet(data)


def test_node_read_runs_here_and_every_fact_parses(tmp_path):
    import sys

    fleet = fleet2()
    node = fleet.nodes[0]
    python = str(Path(sys.executable).parent / "python")
    facts = node_facts(PROBE, python, str(tmp_path / "not" / "yet"), "Qwen/Qwen3-8B")
    read = sections.read_node(LocalConnector("node-a"), facts)
    assert set(read) == {"host", "python", "gpus", "rdma", "topo", "listeners", "disk", "memlock", "model"}
    assert all(r.exit_code != -1 for r in read.values())
    probe = NodeProbe("node-a", "127.0.0.1", "local")
    fill(probe, facts, read, fleet, node, {})
    assert probe.python.present and probe.python.packages["lmcache"]
    assert probe.disk is not None and probe.disk.avail_bytes > 0
    assert probe.memlock is not None and probe.memlock.error is None
    assert probe.model_cache is not None and probe.model_cache.path.endswith("models--Qwen--Qwen3-8B")
    assert len(probe.ports) == 5  # coordinator + mp/http/p2p/engine


def test_values_in_the_node_read_are_quoted(tmp_path):
    evil = tmp_path / "run dir'; touch PWNED; '"
    facts = node_facts(PROBE, "/no/such python", str(evil), "org/model; touch PWNED2")
    read = sections.read_node(LocalConnector(), facts)
    assert facts["python"].parse(read["python"].output).error == "no python at /no/such python"
    assert not list(tmp_path.glob("PWNED*")) and not Path("PWNED").exists()


# ---- verdicts -----------------------------------------------------------------------------------------

def test_ports_free_ours_or_busy():
    fleet = fleet2()
    plan = planned_ports(fleet, fleet.nodes[0])
    port = plan[1][0]  # node-a-0 mp
    listeners = [Listener("0.0.0.0", port, "nginx", 911), Listener("127.0.0.1", plan[2][0], "lmcache", 42),
                 Listener("10.0.0.1", plan[3][0], "other", 5)]
    checks = check_ports(plan, listeners, {42: "node-a-0/server"})
    assert [c.state for c in checks] == ["free", "busy", "this fleet", "free", "free"]
    assert "nginx pid 911" in checks[1].holder and "node-a-0/server" in checks[2].holder


def _probe(**kw) -> NodeProbe:
    base = dict(python=PythonEnv("/v/bin/python", "3.11.7", {"lmcache": "0.5.6", "nixl": "1.5.1", "vllm": None}),
                gpus=None, memlock=Memlock(8192 * 1024, 8192 * 1024), disk=Disk("/", 10 * 2**40, 10 * 2**40))
    base.update(kw)
    return NodeProbe("node-a", "127.0.0.1", "local", **base)


def test_a_ready_cpu_node_has_no_problems():
    fleet = fleet2()
    p = _probe()
    assess_node(fleet, fleet.nodes[0], p)
    assert p.ok and p.problems == [] and p.warnings == []


def test_vllm_nodes_need_gpus_vllm_and_want_the_model_cached():
    data = local_fleet(2, name="v", runtime="vllm", vllm={"device": "cuda", "venv": ""})
    data["model"] = "Qwen/Qwen3-8B"
    data["nodes"][0]["instances"][0]["gpu"] = 3
    fleet = parse_fleet(data)
    p = _probe(model_cache=ModelCache(False, "/r/hub/models--Qwen--Qwen3-8B"))
    assess_node(fleet, fleet.nodes[0], p)
    text = "\n".join(v.line() for v in p.problems)
    assert "no GPU is visible" in text and "vllm is not installed" in text
    assert {v.id for v in p.problems} >= {"no_gpu", "vllm_missing"}
    assert [v.id for v in p.warnings] == ["model_not_cached"] and "not in the cache" in p.warnings[0].line()
    assert "huggingface-cli download Qwen/Qwen3-8B" in p.warnings[0].fix
    p2 = _probe(gpus=parse_gpus(NVIDIA_SMI))
    assess_node(fleet, fleet.nodes[0], p2)
    assert any(v.id == "gpus_missing" and "GPU(s) [3]" in v.line() for v in p2.problems)


def test_cpu_vllm_nodes_need_no_gpu_and_their_vllm_venv_is_left_to_preflight():
    fleet = parse_fleet(local_fleet(2, name="v", runtime="vllm", vllm={"venv": "/opt/vllm"}))
    p = _probe()
    assess_node(fleet, fleet.nodes[0], p)
    assert not any("GPU" in v.line() or v.id == "vllm_missing" for v in p.problems), p.problems


def test_missing_venv_memlock_with_rdma_busy_port_and_version_skew():
    fleet = fleet2()
    a = _probe(python=PythonEnv("/v/bin/python", error="no python at /v/bin/python"))
    assess_node(fleet, fleet.nodes[0], a)
    assert [v.id for v in a.problems] == ["python_missing"] and "--bootstrap" in a.problems[0].fix
    b = _probe(rdma=[IbDevice("mlx5_0", 0)],
               ports=[PortCheck(8081, "x http", "127.0.0.1", "busy", "nginx pid 1")])
    assess_node(fleet, fleet.nodes[1], b)
    assert any(v.id == "port_busy" and "port 8081 (x http) is held by nginx pid 1" in v.line() for v in b.problems)
    assert any(v.id == "memlock" and "unlimited" in v.line() for v in b.warnings)
    c = _probe(python=PythonEnv("/v/bin/python", "3.11.7", {"lmcache": "0.5.5", "nixl": "1.5.1"}))
    d = _probe()
    assess_fleet(fleet, {"node-a": c, "node-b": d})
    assert any(v.id == "versions_differ" and "lmcache versions differ across nodes (node-a=0.5.5, node-b=0.5.6)"
               in v.line() for v in c.problems)


# ---- bootstrap ----------------------------------------------------------------------------------------

def test_bootstrap_follows_the_makefile_setup_steps():
    steps = pip_steps((CHECKOUT / "Makefile").read_text())
    # A node gets the node runtime extra (the engine, lmcache, nixl), not the checkout's charts and test tools.
    assert steps and steps[-1] == ["-q", "-e", ".[node]"]
    script = bootstrap_script("/opt/p2p venv", "/src/p2p", steps)
    assert "python3 -m venv '/opt/p2p venv'" in script
    assert "'/opt/p2p venv'/bin/pip install -q -e '/src/p2p[node]'\n" in script
    assert "plots" not in script and "dev]" not in script
    for args in steps[:-1]:
        assert " ".join(args) in script
    assert script.index("python3 -m venv") < script.index("/bin/pip install")
    assert "test -f /src/p2p/pyproject.toml" in script
    r = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- the CLI on a local fleet -------------------------------------------------------------------------

def test_p2pctl_probe_json_on_a_local_fleet(tmp_path, p2pctl):
    fleet_file = write_local_fleet(tmp_path / "fleet.yaml", 2, name="pr")
    code, out, err = p2pctl("probe", "-f", str(fleet_file), "--json")
    data = json.loads(out)
    assert code == 0, (data, err)
    assert set(data["nodes"]) == {"node-a", "node-b"} and data["ok"]
    a = data["nodes"]["node-a"]
    assert a["python"]["packages"]["lmcache"] and a["error"] is None
    assert [p["state"] for p in a["ports"]] == ["free"] * 5
    code, out, _ = p2pctl("probe", "-f", str(fleet_file))
    assert code == 0 and "node node-a" in out and "lmcache / nixl / vllm" in out


def test_p2pctl_probe_names_an_unknown_node(tmp_path, p2pctl):
    fleet_file = write_local_fleet(tmp_path / "fleet.yaml", 2, name="pr")
    code, _, err = p2pctl("probe", "-f", str(fleet_file), "--node", "nope")
    assert code == 2 and "no such node" in err


# ---- probing through the nodes' connectors (scripted fakes) ---------------------------------------------

def _python_json(python: str) -> str:
    return json.dumps({"python": "3.11.7", "executable": python,
                       "packages": {"lmcache": "0.5.6", "nixl-cu12": "1.5.1", "torch": "2.13.0", "vllm": None}})


def probe_read(ctx, node, listeners: str = "", python_missing: bool = False, repeat: bool = False):
    """The probe's batched read of a node answered as a ready CPU node would (or one without its venv)."""
    python = node_python(node)
    facts = node_facts(PROBE, python, str(ctx.node_layout(node).root), None)
    return node_read(facts, {
        "host": f"{node.name}\n6.8.0-45-generic",
        "python": f"missing {python}" if python_missing else _python_json(python),
        "gpus": ABSENT, "rdma": "", "listeners": listeners, "disk": DF, "memlock": "unlimited unlimited", "model": ABSENT,
    }, repeat=repeat)


def test_probe_reports_a_node_it_cannot_reach_and_still_the_others(fakes):
    fleet = fakes.fleet(2, {"node-b": [unreachable("node-b", "root@10.0.0.2:22")]}, name="pr")
    ctx = fleet.ctx
    node_a = ctx.fleet.nodes[0]
    fleet["node-a"].expect(probe_read(ctx, node_a), pid_states(ctx.procs(node_a)))
    probes = probe_fleet(ctx)
    assert probes["node-a"].ok and probes["node-b"].error.startswith("node-b (root@10.0.0.2:22): unreachable")


def test_probe_tells_the_fleets_own_listeners_from_a_stranger(fakes):
    fleet = fakes.fleet(2, {"node-b": []}, name="pr")
    ctx = fleet.ctx
    node_a = ctx.fleet.nodes[0]
    server, coordinator = ctx.unit("server", "node-a-0"), ctx.unit("coordinator")
    http, mp = (next(p.port for p in server.ports if p.kind == k) for k in ("http", "mp"))
    ss = (f'LISTEN 0 128 127.0.0.1:{http} 0.0.0.0:* users:(("lmcache",pid=4121,fd=18))\n'
          f'LISTEN 0 128 0.0.0.0:{mp} 0.0.0.0:* users:(("nginx",pid=911,fd=3))\n')
    fleet["node-a"].expect(probe_read(ctx, node_a, ss),
                           pid_states(ctx.procs(node_a), {server.name: 4121, coordinator.name: "dead 3"}))
    fleet["node-b"].expect(probe_read(ctx, ctx.fleet.nodes[1]), pid_states(ctx.procs(ctx.fleet.nodes[1])))
    probes = probe_fleet(ctx)
    states = {pc.port: (pc.state, pc.holder) for pc in probes["node-a"].ports}
    assert states[http] == ("this fleet", "lmcache pid 4121 on 127.0.0.1 (node-a-0/server)")
    assert states[mp] == ("busy", "nginx pid 911 on 0.0.0.0")
    assert any(f"port {mp} (node-a-0 mp) is held by nginx pid 911" in v.line() for v in probes["node-a"].problems)
    assert probes["node-b"].ok and not probes["node-a"].ok


def test_bootstrap_runs_only_on_nodes_without_their_venv(tmp_path, fakes, p2pctl, monkeypatch):
    venv = str(tmp_path / "no venv yet")

    def edit(data):
        data["nodes"][1]["venv"] = venv

    fleet = fakes.fleet(2, name="pr", edit=edit)
    ctx = fleet.ctx
    node_a, node_b = ctx.fleet.nodes
    steps = pip_steps((CHECKOUT / "Makefile").read_text())
    # Both probes (before and after the bootstrap) read each node; only node-b is bootstrapped.
    fleet["node-a"].expect(probe_read(ctx, node_a, repeat=True), pid_states(ctx.procs(node_a), repeat=True))
    fleet["node-b"].expect(probe_read(ctx, node_b, python_missing=True, repeat=True),
                           pid_states(ctx.procs(node_b), repeat=True),
                           expect(exactly(bootstrap_script(venv, str(CHECKOUT), steps)), f"bootstrapped {venv}\n",
                                  label="bootstrap"))
    cli_through(monkeypatch, fleet)
    code, out, _ = p2pctl("probe", "-f", str(ctx.fleet_file), "--json", "--bootstrap")
    result = json.loads(out)
    calls = [host for host, label in fleet.labels() if label == "bootstrap"]
    assert calls == ["node-b"] and result["bootstrap"] == {"node-b": f"bootstrapped {tmp_path / 'no venv yet'}"}
    assert code == 1 and any(p["id"] == "python_missing" and "--bootstrap" in p["fix"]
                             for p in result["nodes"]["node-b"]["problems"])
    assert result["nodes"]["node-a"]["ok"]


def test_bootstrap_script_never_runs_a_value(tmp_path):
    """A venv or project path holding `$(...)` is data, also in the "does not see the checkout" message."""
    import subprocess


    canary = tmp_path / "canary"
    venv = str(tmp_path / f"venv$(touch {canary})")
    project = str(tmp_path / f"proj`touch {canary}`")
    script = bootstrap_script(venv, project, [["-e", "."]])
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and f"does not see {project}" in res.stderr and venv in res.stderr
    assert not canary.exists()
