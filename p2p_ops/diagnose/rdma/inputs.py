"""What the RDMA readiness checks look at (`RdmaInputs`), and `gather_rdma`, which reads it from a host view.

The checks (`p2p_ops.diagnose.rdma.check`, `host_checks`) are pure functions of these inputs, so the same checks run on
the live host, on a fixture tree and on a bundle's snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from p2p_ops.facts.host_view import HostView
from p2p_ops.facts.ib_model import IbDevice
from p2p_ops.facts.limits import Memlock, read_memlock, read_modules
from p2p_ops.facts.netdev import NetDev, read_netdevs
from p2p_ops.facts.sysfs_ib import list_dev_infiniband, read_ib_devices, read_uverbs
from p2p_ops.facts.topo import NVIDIA_SMI_TOPO, Topology
from p2p_ops.facts.ucx_info import UCX_INFO_DEVICES, UcxDevices


@dataclass
class RdmaInputs:
    """Everything the RDMA check looks at, gathered once; None means the fact could not be read."""

    devices: list[IbDevice] = field(default_factory=list)
    uverbs: dict[str, str] = field(default_factory=dict)
    uverbs_class_present: bool = False
    dev_nodes: list[str] = field(default_factory=list)
    memlock: Memlock = field(default_factory=Memlock)
    modules: list[str] | None = None
    peermem_sysfs: bool = False
    topo: Topology | None = None
    ucx_devices: UcxDevices | None = None
    netdevs: list[NetDev] = field(default_factory=list)
    nixl_lanes: list[str] | None = None


def gather_rdma(host: HostView, pid: int | str = "self",
                nixl_lanes: Callable[[], list[str] | None] | None = None) -> RdmaInputs:
    """Read the facts. `nixl_lanes` is asked for UCX's lanes only when there is no RDMA and no `ucx_info`."""
    topo = NVIDIA_SMI_TOPO.collect(host.runner)
    ucx = UCX_INFO_DEVICES.collect(host.runner)
    inputs = RdmaInputs(
        devices=read_ib_devices(host.sysfs),
        uverbs=read_uverbs(host.sysfs),
        uverbs_class_present=(host.sysfs / "class" / "infiniband_verbs").is_dir(),
        dev_nodes=list_dev_infiniband(host.dev),
        memlock=read_memlock(host.proc, pid),
        modules=read_modules(host.proc),
        peermem_sysfs=any((host.sysfs / p).exists() for p in (
            Path("module/nvidia_peermem"), Path("module/nv_peer_mem"), Path("kernel/mm/memory_peers/nv_mem"))),
        topo=None if topo.error else topo,
        ucx_devices=None if ucx.error else ucx,
        netdevs=read_netdevs(host.sysfs),
    )
    if not inputs.devices and inputs.ucx_devices is None and nixl_lanes is not None:
        inputs.nixl_lanes = nixl_lanes()
    return inputs
