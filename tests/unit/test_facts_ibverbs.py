"""ibverbs tool parsers (`ibv_devinfo`, `ibv_devices`, `rdma link`) on captured and recorded outputs."""

from __future__ import annotations

import shlex
from pathlib import Path

from p2p_ops.connectors.base import Result
from p2p_ops.facts.ibverbs import IBV_DEVINFO, parse_ibv_devices, parse_ibv_devinfo, parse_rdma_link, split_enum

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def read(*parts: str) -> str:
    return FIX.joinpath(*parts).read_text()


def test_devinfo_without_rdma_netlink_is_an_error_not_a_device():
    info = parse_ibv_devinfo(read("ucx", "ibv_devinfo_noib.txt"))
    assert info.devices == []
    assert info.error == "Failed to get IB devices list: Function not implemented"


def test_devinfo_verbose_infiniband_ports_and_gids():
    info = parse_ibv_devinfo(read("ibverbs", "ibv_devinfo_v_ib_ndr.txt"))
    assert [d.name for d in info.devices] == ["mlx5_ib0", "mlx5_ib1"]
    dev = info.devices[0]
    assert dev.transport == "InfiniBand" and dev.fields["fw_ver"] == "28.39.2048"
    assert dev.fields["atomic_cap"] == "ATOMIC_HCA (1)"
    port = dev.ports[0]
    assert (port.port, port.state, port.state_code, port.phys_state) == (1, "ACTIVE", 4, "LINK_UP")
    assert (port.link_layer, port.sm_lid, port.lid, port.active_width) == ("InfiniBand", "1", "1554", "4X (2)")
    assert port.gids[0].gid == "fe80:0000:0000:0000:a088:c203:0012:1e40" and port.gids[0].type == ""
    init = info.devices[1].ports[0]
    assert (init.state, init.phys_state, init.sm_lid) == ("INIT", "LINK_UP", "0")


def test_devinfo_roce_gid_types_in_both_address_forms():
    info = parse_ibv_devinfo(read("ibverbs", "ibv_devinfo_v_roce.txt"))
    up, down = info.devices[0].ports[0], info.devices[1].ports[0]
    assert [(g.index, g.type) for g in up.gids] == [(0, "RoCE v1"), (1, "RoCE v2"), (2, "RoCE v1"), (3, "RoCE v2")]
    assert up.gids[3].gid == "::ffff:198.18.1.11"
    assert (down.state, down.phys_state, down.active_mtu) == ("DOWN", "POLLING", "1024 (3)")
    assert all("v2" not in g.type or g.gid.startswith("fe80") for g in down.gids)


def test_devinfo_short_form_and_device_ports_line():
    info = parse_ibv_devinfo(read("ibverbs", "ibv_devinfo_roce_down_and_rxe.txt"))
    mlx, rxe = info.devices
    assert mlx.ports[0].state == "DOWN" and mlx.ports[0].link_layer == "Ethernet"
    assert rxe.fields["vendor_id"] == "0xffffff" and "Device ports" not in rxe.fields
    assert rxe.ports[0].state == "ACTIVE"


def test_devinfo_failed_open_and_split_enum():
    assert parse_ibv_devinfo(read("ibverbs", "ibv_devinfo_failed_open.txt")).error == "Failed to open device"
    assert split_enum("PORT_ACTIVE (4)") == ("PORT_ACTIVE", 4)
    assert split_enum("PORT_CONFIGURATION TRAINNING (4)") == ("PORT_CONFIGURATION TRAINNING", 4)
    assert split_enum("Ethernet") == ("Ethernet", None)


def test_devinfo_fact_runs_through_an_injected_runner():
    calls = []

    def runner(argv):
        calls.append(tuple(argv))
        return Result("fixture", shlex.join(argv), 255, "", read("ucx", "ibv_devinfo_noib.txt"))

    assert IBV_DEVINFO.collect(runner).error.startswith("Failed to get IB devices list")
    assert calls == [("ibv_devinfo", "-v")]


def test_ibv_devices_table_and_error():
    assert parse_ibv_devices(read("ibverbs", "ibv_devices.txt")).devices == {
        "mlx5_0": "0c42a103004029a0", "rxe0": "9c7ff4fffeaff293"}
    noib = parse_ibv_devices(read("ucx", "ibv_devices_noib.txt"))
    assert noib.devices == {} and "Function not implemented" in noib.error


def test_rdma_link_text_with_lid_fields_and_trailing_space():
    links = parse_rdma_link(read("ibverbs", "rdma_link.txt")).links
    assert [(x.device, x.port, x.state, x.netdev) for x in links] == [
        ("mlx5_0", 1, "ACTIVE", "ens1f0np0"), ("rocep9s0", 1, "DOWN", "benic8p1"),
        ("mlx5_7", 1, "DOWN", ""), ("ibp195s0", 1, "ACTIVE", "ibp195s0")]
    assert links[2].attrs["lid"] == "3403" and links[2].physical_state == "POLLING"


def test_rdma_link_json_and_no_netlink():
    links = parse_rdma_link(read("ibverbs", "rdma_link.json")).links
    assert [(x.device, x.state, x.netdev) for x in links] == [("mlx5_0", "ACTIVE", "ens1f0np0"), ("mlx5_1", "INIT", "")]
    assert links[1].attrs["sm_lid"] == "1"
    none = parse_rdma_link(read("ucx", "rdma_link_noib.txt"))
    assert none.links == [] and none.error == "Failed to open NETLINK_RDMA socket"


def test_recorded_runner_replays_output_and_exit_code():
    from p2p_ops.facts import recorded_runner

    runner = recorded_runner(FIX / "rdma" / "no_rdma" / "tools")
    result = runner(IBV_DEVINFO.argv)
    info = IBV_DEVINFO.parse(result.output)
    assert result.exit_code == 255 and info.error.startswith("Failed to get IB devices list")
    assert runner(("nvidia-smi", "topo", "-m")).not_found  # no recording = tool absent
