"""Sysfs facts (RDMA devices, uverbs, /dev/infiniband, netdevs) read from fixture trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.facts.ib_model import gid_ipv4, split_prefixed
from p2p_ops.facts.netdev import read_netdevs
from p2p_ops.facts.sysfs_ib import list_dev_infiniband, read_ib_devices, read_uverbs

TREES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "rdma"


def test_ib_tree_devices_ports_counters_numa():
    devices = read_ib_devices(TREES / "ib_healthy" / "sys")
    assert [d.name for d in devices] == [f"mlx5_{i}" for i in range(8)]
    dev = devices[5]
    assert dev.numa_node == 1 and dev.node_guid.startswith("a088:c203")
    port = dev.ports[0]
    assert (port.port, port.state, port.state_code, port.phys_state) == (1, "ACTIVE", 4, "LinkUp")
    assert (port.link_layer, port.rate, port.lid, port.sm_lid) == ("InfiniBand", "400 Gb/sec (4X NDR)", "0x4", "0x1")
    assert port.counters["port_xmit_data"] == 1005 * 10**6  # raw 4-byte words; rails multiplies
    assert len(port.gids) == 1  # all-zero slots are unused and skipped


def test_roce_tree_gid_types_ndevs_and_ipv4():
    dev = {d.name: d for d in read_ib_devices(TREES / "roce_healthy" / "sys")}["rocep65s0f0"]
    port = dev.ports[0]
    assert port.link_layer == "Ethernet" and dev.netdevs == ["ens1f0np0"]
    assert [(g.index, g.type, g.ndev) for g in port.gids][:2] == [
        (0, "IB/RoCE v1", "ens1f0np0"), (1, "RoCE v2", "ens1f0np0")]
    assert [g.index for g in port.roce_v2_ipv4_gids()] == [3]
    assert gid_ipv4(port.gids[3].gid) == "198.18.1.11"


def test_roce_without_ipv4_gid_has_only_link_local_v2():
    devices = {d.name: d for d in read_ib_devices(TREES / "roce_no_ipv4_gid" / "sys")}
    assert devices["rocep65s0f0"].ports[0].roce_v2_ipv4_gids()
    port = devices["rocep193s0f0"].ports[0]
    assert any(g.type == "RoCE v2" for g in port.gids)  # fe80:: is tagged RoCE v2 too ...
    assert port.roce_v2_ipv4_gids() == []  # ... but is not routable


@pytest.mark.parametrize("value,expected", [
    ("4: ACTIVE", (4, "ACTIVE")), ("2: Polling", (2, "Polling")), ("7: Phy Test", (7, "Phy Test")),
    ("InfiniBand", (None, "InfiniBand")), (None, (None, "")),
])
def test_split_prefixed(value, expected):
    assert split_prefixed(value) == expected


@pytest.mark.parametrize("gid,ip", [
    ("0000:0000:0000:0000:0000:ffff:0a7d:016b", "10.125.1.107"),
    ("::ffff:192.170.1.101", "192.170.1.101"),
    ("fe80:0000:0000:0000:b226:28ff:fed3:b0f0", None),
    ("not-a-gid", None),
])
def test_gid_ipv4(gid, ip):
    assert gid_ipv4(gid) == ip


def test_down_port_and_uverbs_mapping():
    tree = TREES / "ib_one_rail_down"
    port = read_ib_devices(tree / "sys")[3].ports[0]
    assert (port.state, port.phys_state, port.rate) == ("DOWN", "Polling", "10 Gb/sec (4X SDR)")
    assert read_uverbs(tree / "sys")["uverbs3"] == "mlx5_3"
    assert "uverbs7" in list_dev_infiniband(tree / "dev") and "rdma_cm" in list_dev_infiniband(tree / "dev")
    assert list_dev_infiniband(TREES / "no_uverbs" / "dev") == []


def test_no_rdma_tree_and_netdevs():
    tree = TREES / "no_rdma" / "sys"
    assert read_ib_devices(tree) == [] and read_uverbs(tree) == {}
    nds = {n.name: n for n in read_netdevs(tree)}
    assert nds["lo"].virtual and nds["lo"].up  # loopback reports operstate "unknown"
    assert nds["eth0"].up and not nds["eth0"].virtual and nds["eth0"].rx_bytes == 3838320
    assert not nds["ifb0"].up


def test_live_sysfs_reads_without_error():
    # Whatever this machine has, reading it must not raise.
    read_ib_devices(Path("/sys"))
    assert any(n.name == "lo" for n in read_netdevs(Path("/sys")))
