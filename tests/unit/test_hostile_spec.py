"""A spec that says one thing and means another, or crashes the loader: each is refused in one line naming the
field (exit 2), and `validate` warns about what is allowed but risky (issue 20, "Hostile files")."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet, starter_yaml


def write(tmp_path, text: str):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    return f


def one_line_exit_2(p2pctl, *argv: str) -> str:
    code, out, err = p2pctl(*argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_duplicate_keys_are_refused_naming_the_key(tmp_path, p2pctl):
    text = starter_yaml(local_fleet(2)) + "nodes:\n- name: x\n  instances: [{id: x-0, ports: {mp: 1, http: 2, p2p: 3, engine: 4}}]\n"
    err = one_line_exit_2(p2pctl, "validate", "-f", str(write(tmp_path, text)))
    assert "'nodes'" in err and "twice" in err and "line" in err


def test_duplicate_keys_deep_inside_are_refused(tmp_path, p2pctl):
    data = starter_yaml(local_fleet(1)).replace("  chunk_size: 256\n", "  chunk_size: 256\n  chunk_size: 512\n")
    err = one_line_exit_2(p2pctl, "validate", "-f", str(write(tmp_path, data)))
    assert "'chunk_size'" in err and "twice" in err


@pytest.mark.parametrize("text,needle", [
    ("name: " + "[" * 1000 + "]" * 1000 + "\n", "nested deeper"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "too large"),
    ("name: x\nsettings:\n  chunk_size: " + "9" * 4300 + "\n", "settings.chunk_size"),
    ("name: x\nsettings:\n  chunk_size: " + "9" * 5000 + "\n", "settings.chunk_size: Input should be a valid integer"
     " (got an integer of 5000 digits)"),
    ("name: x\ncoordinator:\n  port: 1:20\n", "sexagesimal"),
])
def test_yaml_that_would_crash_or_mislead_is_one_line(tmp_path, p2pctl, text, needle):
    err = one_line_exit_2(p2pctl, "validate", "-f", str(write(tmp_path, text)))
    assert needle in err


@pytest.mark.parametrize("path,value,needle", [
    ("name", "f" * 300, "name: "),
    ("nodes.0.name", "n" * 300, "nodes[0].name"),
    ("nodes.0.instances.0.id", "i" * 300, "nodes[0].instances[0].id"),
    ("nodes.0.instances.0.ports.http", True, "nodes[0].instances[0].ports.http"),
    ("coordinator.port", False, "coordinator.port"),
    ("settings.heartbeat_interval", True, "settings.heartbeat_interval"),
    ("settings.p2p_lookup_timeout", float("inf"), "settings.p2p_lookup_timeout"),
    ("settings.p2p_load_timeout", 10 ** 30, "settings.p2p_load_timeout"),
    ("coordinator.timeout_keep_alive", 10 ** 30, "coordinator.timeout_keep_alive"),
    ("nodes.0.address", "a" * 300, "nodes[0].address"),
    ("model", "x\u2028export EVIL=1", "model"),
    ("settings.ucx_tls", "tcp\u0085rc", "settings.ucx_tls"),
    ("nodes.0.run_dir", "/r/" + "\u2029", "nodes[0].run_dir"),
])
def test_values_out_of_their_fields_range_are_refused(tmp_path, p2pctl, path, value, needle):
    data = local_fleet(2)
    cur = data
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if p.isdigit() else cur[p]
    cur[int(parts[-1]) if parts[-1].isdigit() else parts[-1]] = value
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))  # escapes: YAML itself reads a raw NEL or U+2028 as a line break
    err = one_line_exit_2(p2pctl, "validate", "-f", str(f))
    assert needle in err, err


def test_prometheus_port_clashing_with_a_server_port_is_caught():
    data = local_fleet(2)
    data["prometheus"] = {"port": data["nodes"][1]["instances"][0]["ports"]["http"]}
    with pytest.raises(Exception) as exc:
        parse_fleet(data)
    assert "prometheus.port" in str(exc.value) and "node-b-0" in str(exc.value)


def test_init_with_a_port_offset_never_clashes_with_prometheus(tmp_path, p2pctl):
    out = tmp_path / "fleet.yaml"
    code, _, err = p2pctl("init", "--local", "2", "--port-offset", "90", "-o", str(out))
    assert code == 0, err
    fleet = parse_fleet(yaml.safe_load(out.read_text()))
    assert fleet.prometheus.port != fleet.coordinator.port


def test_ipv6_nodes_get_bracketed_urls(tmp_path):
    from p2p_ops.lifecycle.render import render_fleet
    from p2p_ops.spec.units import fleet_units

    data = local_fleet(2)
    data["coordinator"]["host"] = "::1"
    for node in data["nodes"]:
        node["address"] = "::1"
    data["router"] = {"enabled": True}
    data["prometheus"] = {"host": "::1"}
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    ctx = FleetContext.load(f)
    urls = [u.url for u in fleet_units(ctx.fleet)] + [ctx.fleet.coordinator_url, ctx.fleet.router_url]
    assert all(u.startswith("http://[::1]:") for u in urls), urls
    text = "\n".join(r.text for r in render_fleet(ctx.fleet, ctx.node_layout))
    assert "://::1" not in text and "http://[::1]:" in text and "tcp://[::1]:" in text


def test_insecure_host_keys_on_a_routable_address_warn_at_validate(tmp_path, p2pctl):
    data = local_fleet(2)
    data["nodes"][1].update(connection="ssh", address="10.20.30.40", ssh_insecure_host_keys=True)
    f = write(tmp_path, yaml.safe_dump(data))
    code, out, err = p2pctl("validate", "-f", str(f))
    assert code == 0, err
    assert "nodes[1].ssh_insecure_host_keys" in err and "10.20.30.40" in err
    code, out, err = p2pctl("validate", "-f", str(f), "--json")
    warnings = json.loads(out)["warnings"]
    assert any("nodes[1].ssh_insecure_host_keys" in w for w in warnings)


def test_insecure_host_keys_on_a_test_address_stay_quiet(tmp_path, p2pctl):
    data = local_fleet(2)
    data["nodes"][1].update(connection="ssh", address="198.18.0.2", ssh_insecure_host_keys=True)
    code, out, err = p2pctl("validate", "-f", str(write(tmp_path, yaml.safe_dump(data))), "--json")
    assert code == 0 and json.loads(out)["warnings"] == []


def test_init_writes_a_private_spec_when_it_holds_an_api_key_and_render_a_private_run_folder(tmp_path, p2pctl):
    from p2p_ops.lifecycle import launch

    data = local_fleet(2)
    data["api_key"] = "not-a-real-key-0123"
    f = write(tmp_path, yaml.safe_dump(data))
    f.chmod(0o644)
    code, out, err = p2pctl("validate", "-f", str(f))
    assert code == 0 and "fleet.yaml" in err and "chmod 600" in err, err  # a readable key is worth a warning
    ctx = FleetContext.load(f)
    launch.render(ctx)
    run = tmp_path / "p2p-run"
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE(ctx.layout.root.stat().st_mode) == 0o700


def test_init_spec_is_private_when_the_template_holds_a_key(tmp_path):
    from p2p_ops.spec.starter import write_starter

    data = local_fleet(1)
    data["api_key"] = "k-0123456789"
    out = tmp_path / "fleet.yaml"
    write_starter(out, data)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    write_starter(out, local_fleet(1), force=True)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
