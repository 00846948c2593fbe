"""One port plan: the starter fleet's defaults and `port_plan`, which the probe and the doctor read."""

from __future__ import annotations

from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.ports import DEFAULT_BASE, default_base, local_fleet_ports
from p2p_ops.spec.starter import dump_yaml, local_fleet
from p2p_ops.spec.units import port_plan

BASE_KINDS = ("coordinator", "mp", "http", "p2p", "engine")


def two_hosts() -> dict:
    data = local_fleet(3, name="plan")
    data["nodes"][1]["connection"] = data["nodes"][2]["connection"] = "ssh"
    data["nodes"][1]["address"], data["nodes"][2]["address"] = "10.0.0.2", "10.0.0.3"
    data["nodes"][2]["bind"] = "0.0.0.0"
    data["nodes"][2]["instances"].append({"id": "node-c-1", "ports": {"mp": 6000, "http": 6001, "p2p": 6002,
                                                                     "engine": 6003}})
    return data


def test_the_starter_fleet_uses_the_default_base_and_its_ports_are_the_planned_ones():
    fleet = parse_fleet(local_fleet(2))
    assert fleet.coordinator.port == DEFAULT_BASE["coordinator"]
    assert fleet.nodes[1].instances[0].ports.model_dump() == {k: DEFAULT_BASE[k] + 2 for k in ("mp", "http", "p2p",
                                                                                                 "engine")}
    assert sorted(local_fleet_ports(default_base(), 2)) == sorted(p.port for p in port_plan(fleet))
    assert default_base(1000)["engine"] == DEFAULT_BASE["engine"] + 1000


def test_port_plan_lists_every_instance_port_on_its_node_with_its_owner():
    fleet = parse_fleet(two_hosts())
    plan = port_plan(fleet)
    assert [(p.node, p.port, p.kind, p.process) for p in plan if p.instance == "node-c-1"] == [
        ("node-c", 6000, "mp", "node-c-1/server"), ("node-c", 6001, "http", "node-c-1/server"),
        ("node-c", 6002, "p2p", "node-c-1/server"), ("node-c", 6003, "engine", "node-c-1/engine")]
    assert {p.bind for p in plan if p.node == "node-c"} == {"0.0.0.0"}
    assert plan[0].kind == "coordinator" and plan[0].process == "coordinator/coordinator"
    assert len(plan) == 1 + 4 * 4


def test_a_router_adds_its_ports_and_the_engines_kv_event_ports(tmp_path):
    data = local_fleet(2, name="routed")
    data["router"] = {"enabled": True, "policy": "kv_aware", "port": 8200, "prometheus_port": 8201,
                      "kv_events_port_base": 5557}
    path = tmp_path / "fleet.yaml"
    path.write_text(dump_yaml(data))
    with FleetContext.load(path) as ctx:
        extra = [p for p in port_plan(ctx.fleet) if p.kind not in BASE_KINDS]
        # In start order: each engine's KV-event ports with its engine, then the router's.
        assert [(p.node, p.port, p.kind) for p in extra] == [
            ("node-a", 5557, "kv_events"), ("node-a", 5558, "kv_events_replay"),
            ("node-b", 5559, "kv_events"), ("node-b", 5560, "kv_events_replay"),
            ("node-a", 8200, "router"), ("node-a", 8201, "router_prometheus")]
        assert extra[4].process == ctx.proc("router").name
        assert extra[0].process == ctx.proc("engine", ctx.fleet.instances()[0][1]).name
    data["router"]["kv_events"], data["router"]["policy"] = False, "cache_aware"  # kv_aware needs events
    assert [p.kind for p in port_plan(parse_fleet(data)) if p.kind not in BASE_KINDS] == ["router",
                                                                                         "router_prometheus"]
