"""The table of fleet units: every process a fleet can have, where it runs, its ports, its order."""

from __future__ import annotations

from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet
from p2p_ops.spec.units import LAUNCHED_ROLES, ROLES, fleet_units, port_plan


def routed(n: int = 2, runtime: str = "embedded") -> dict:
    data = local_fleet(n, name="units", runtime=runtime)
    data["router"] = {"enabled": True, "policy": "kv_aware", "port": 8200, "prometheus_port": 8201,
                      "kv_events_port_base": 5557}
    if runtime == "vllm":
        data["vllm"].update(venv="/opt/vllm", model_path="/models/tiny")
    return data


def test_every_role_has_units_in_start_order_with_one_name_each():
    units = fleet_units(parse_fleet(routed()))
    assert [u.role for u in units] == ["coordinator", "server", "server", "engine", "engine", "router", "prometheus"]
    assert [u.name for u in units] == ["coordinator/coordinator", "node-a-0/server", "node-b-0/server",
                                       "node-a-0/engine", "node-b-0/engine", "router/router", "prometheus/prometheus"]
    assert set(ROLES) == {u.role for u in units} and LAUNCHED_ROLES == ROLES[:4]
    assert units[-1].node is None and units[-1].phase is None  # Prometheus: this machine, its own verb


def test_phases_follow_the_runtime():
    embedded = {u.name: u.phase for u in fleet_units(parse_fleet(routed()))}
    vllm = {u.name: (u.phase, u.start_timeout_s) for u in fleet_units(parse_fleet(routed(runtime="vllm")))}
    # Embedded engines reconnect to their server, so they start with it; vLLM's connector needs it first.
    assert embedded["node-a-0/server"] == embedded["node-a-0/engine"] == embedded["coordinator/coordinator"] == 0
    assert vllm["node-a-0/server"][0] == 0 and vllm["node-a-0/engine"] == (1, 900.0)
    assert embedded["router/router"] == vllm["router/router"][0] == 2


def test_each_unit_owns_its_ports_and_names_where_the_spec_sets_them():
    fleet = parse_fleet(routed())
    by_name = {u.name: u for u in fleet_units(fleet)}
    server = by_name["node-b-0/server"]
    assert [(p.kind, p.field) for p in server.ports] == [
        ("mp", "nodes[1].instances[0].ports.mp"), ("http", "nodes[1].instances[0].ports.http"),
        ("p2p", "nodes[1].instances[0].ports.p2p")]
    assert [p.kind for p in by_name["node-b-0/engine"].ports] == ["engine", "kv_events", "kv_events_replay"]
    assert server.marker == f"--http-port {fleet.nodes[1].instances[0].ports.http} "
    assert by_name["router/router"].url == "http://127.0.0.1:8200" and "/health" in by_name["router/router"].ready_says
    # The plan is every launched unit's ports; Prometheus's only when asked for.
    assert sum(len(u.ports) for u in fleet_units(fleet, LAUNCHED_ROLES)) == len(port_plan(fleet))
    assert [p.kind for p in port_plan(fleet, ("prometheus",))] == ["prometheus"]


def test_no_router_no_router_unit_and_no_kv_event_ports():
    fleet = parse_fleet(local_fleet(2))
    assert "router" not in {u.role for u in fleet_units(fleet)}
    assert {p.kind for p in port_plan(fleet)} == {"coordinator", "mp", "http", "p2p", "engine"}


def test_an_instance_may_not_take_a_singletons_folder():
    import pytest

    from p2p_ops.errors import BadInput

    data = local_fleet(1)
    data["nodes"][0]["instances"][0]["id"] = "router"
    with pytest.raises(BadInput, match="reserved for the run folder's own router/"):
        parse_fleet(data)
