"""RDMA readiness of one host: can NIXL/UCX move KV over RDMA here, and if not, why.

`gather_rdma(host)` reads the facts (sysfs, /dev, /proc, `nvidia-smi topo -m`, `ucx_info -d`) from a host view:
the live host, a fixture tree or a bundle's snapshot. `check_rdma(inputs)` is pure and returns a `Report`: ports,
then the host-wide checks (uverbs, memlock, GPUDirect, GPU/NIC affinity, the TCP fallback). Each finding names
the device/port, the value and its cause, whose fix the catalogue words (`p2p_ops.causes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from p2p_ops.diagnose.findings import Report
from p2p_ops.facts.host_view import HostView
from p2p_ops.facts.ib_model import IbDevice, IbPort, gid_ipv4
from p2p_ops.facts.limits import PEERMEM_MODULES, Memlock, read_memlock, read_modules
from p2p_ops.facts.netdev import NetDev, read_netdevs
from p2p_ops.facts.sysfs_ib import list_dev_infiniband, read_ib_devices, read_uverbs
from p2p_ops.facts.topo import LINK_RANK, NVIDIA_SMI_TOPO, Topology
from p2p_ops.facts.ucx_info import UCX_INFO_DEVICES, UcxDevices

__all__ = ["RdmaInputs", "check_rdma", "gather_rdma"]

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
        peermem_sysfs=any((host.sysfs / p).exists()
                          for p in ("module/nvidia_peermem", "module/nv_peer_mem", "kernel/mm/memory_peers/nv_mem")),
        topo=None if topo.error else topo,
        ucx_devices=None if ucx.error else ucx,
        netdevs=read_netdevs(host.sysfs),
    )
    if not inputs.devices and inputs.ucx_devices is None and nixl_lanes is not None:
        inputs.nixl_lanes = nixl_lanes()
    return inputs


def _check_state(report: Report, subject: str, port: IbPort) -> None:
    value = f"state {port.state or '?'}, phys_state {port.phys_state or '?'}, rate {port.rate or '?'}"
    if port.state == "INIT" and port.link_layer != "Ethernet":
        report.add("error", "port_state", subject, f"{value}, sm_lid {port.sm_lid or '?'}",
                   "link is up but the port is INIT: no subnet manager has configured it", "port_no_sm")
    elif port.state == "ARMED":
        report.add("warn", "port_state", subject, value, "port ARMED: subnet manager mid-configuration",
                   "port_no_sm")
    elif port.phys_state.lower() == "polling":
        report.add("error", "port_state", subject, value, "port DOWN and polling: no link partner",
                   "port_down")
    elif port.phys_state.lower() == "disabled":
        report.add("error", "port_state", subject, value, "port DOWN: disabled", "port_down")
    else:
        report.add("error", "port_state", subject, value, f"port is {port.state or 'in an unknown state'}",
                   "port_down")


def _check_roce_gid(report: Report, subject: str, dev: IbDevice, port: IbPort) -> None:
    v4 = port.roce_v2_ipv4_gids()
    ndev = next((g.ndev for g in port.gids if g.ndev), dev.netdevs[0] if dev.netdevs else "<netdev>")
    if not v4:
        seen = ", ".join(f"{g.index}:{g.gid} {g.type}".strip() for g in port.gids) or "no GIDs"
        report.add("error", "roce_gid", subject, seen, "", "no_ipv4_gid", netdev=ndev)
    elif all(g.index != 3 for g in v4):
        report.add("info", "roce_gid", subject, f"index {v4[0].index} = {gid_ipv4(v4[0].gid)}", "", "gid_index",
                   index=v4[0].index)


def check_ports(report: Report, inputs: RdmaInputs) -> None:
    rows = []
    for dev in inputs.devices:
        if not dev.ports:
            report.add("error", "port_state", dev.name, "no ports", "device has no ports in sysfs", "port_down")
        for port in dev.ports:
            subject = f"{dev.name}/{port.port}"
            v4 = port.roce_v2_ipv4_gids()
            rows.append({"device": dev.name, "port": port.port, "state": port.state, "phys_state": port.phys_state,
                         "link_layer": port.link_layer, "rate": port.rate, "numa_node": dev.numa_node,
                         "netdev": next((g.ndev for g in port.gids if g.ndev), ",".join(dev.netdevs)),
                         "roce_v2_ipv4_gid": f"{v4[0].index} ({gid_ipv4(v4[0].gid)})" if v4 else ""})
            if not port.active:
                _check_state(report, subject, port)
            elif port.link_layer == "Ethernet":
                _check_roce_gid(report, subject, dev, port)
    report.facts["ports"] = rows
    active = sum(1 for r in rows if r["state"] == "ACTIVE")
    report.add("info", "ports", "rdma", f"{active}/{len(rows)} ports ACTIVE",
               f"{len(inputs.devices)} RDMA device(s), {active} of {len(rows)} port(s) active")


def check_rdma(inputs: RdmaInputs, require_rdma: bool = False) -> Report:
    report = Report("RDMA readiness", source="rdma")
    if not inputs.devices:
        check_tcp_path(report, inputs, require_rdma)
        return report
    check_ports(report, inputs)
    check_uverbs(report, inputs)
    check_memlock(report, inputs)
    check_gpudirect(report, inputs)
    check_affinity(report, inputs)
    return report


# An L1 of several GiB is registered in one piece, so anything short of unlimited is a latent failure.
MEMLOCK_MIN_BYTES = 1 << 40


def check_uverbs(report: Report, inputs: RdmaInputs) -> None:
    uverbs_nodes = [n for n in inputs.dev_nodes if n.startswith("uverbs")]
    if not inputs.dev_nodes:
        names = ", ".join(d.name for d in inputs.devices)
        report.add("error", "uverbs", "/dev/infiniband", "missing", f"RDMA devices are visible in sysfs ({names}) but "
                   "/dev/infiniband is absent ('Failed to open device')", "no_uverbs")
        return
    if not inputs.uverbs_class_present:
        report.add("error", "uverbs", "ib_uverbs", "no /sys/class/infiniband_verbs", "", "uverbs_module")
        return
    by_dev = {ibdev: node for node, ibdev in inputs.uverbs.items()}
    for dev in inputs.devices:
        node = by_dev.get(dev.name)
        if node is None or node not in uverbs_nodes:
            report.add("error", "uverbs", dev.name, node or "no uverbs device",
                       f"{dev.name} has no usable /dev/infiniband/{node or 'uverbsN'}", "no_uverbs")


def check_memlock(report: Report, inputs: RdmaInputs) -> None:
    mem = inputs.memlock
    if mem.error:
        report.add("warn", "memlock", "memlock", mem.error, "could not read the locked-memory limit", "memlock")
    elif not mem.unlimited and (mem.soft or 0) < MEMLOCK_MIN_BYTES:
        report.add("error", "memlock", mem.source, f"soft {mem.soft} bytes, hard {mem.hard or 'unlimited'}", "",
                   "memlock")


def check_gpudirect(report: Report, inputs: RdmaInputs) -> None:
    if inputs.topo is None or not inputs.topo.gpus:
        report.add("info", "gpudirect", "gpu", "nvidia-smi absent or no GPUs",
                   "no NVIDIA GPUs seen: GPUDirect RDMA does not apply")
        return
    loaded = inputs.peermem_sysfs or bool(set(inputs.modules or []) & set(PEERMEM_MODULES))
    dmabuf = bool(inputs.ucx_devices and inputs.ucx_devices.has_dmabuf())
    if loaded or dmabuf:
        how = "nvidia_peermem loaded" if loaded else "UCX reports cuda memory with dmabuf"
        report.add("info", "gpudirect", "gpu", how, "GPUDirect RDMA available")
    elif inputs.modules is None and inputs.ucx_devices is None:
        report.add("info", "gpudirect", "gpu", "/proc/modules unreadable, no ucx_info",
                   "cannot tell whether GPUDirect RDMA is available")
    else:
        report.add("warn", "gpudirect", "gpu", "no nvidia_peermem module, no dmabuf memory type", "", "no_peermem")


def check_affinity(report: Report, inputs: RdmaInputs) -> None:
    topo = inputs.topo
    if topo is None or not topo.gpus or not topo.nics:
        return
    active = {d.name for d in inputs.devices if any(p.active for p in d.ports)}
    known = {d.name for d in inputs.devices}
    affinity = {}
    for gpu in topo.gpus:
        link, nics = topo.closest_nics(gpu)
        affinity[gpu] = {"link": link, "nics": nics}
        if link and LINK_RANK[link] >= LINK_RANK["NODE"]:
            report.add("warn", "affinity", gpu, f"closest NIC(s) {','.join(nics)} via {link}", "", "gpu_nic_far")
        down = [n for n in nics if n in known and n not in active]
        if down and len(down) == len(nics):
            report.add("error", "affinity", gpu, f"nearest NIC(s) {','.join(down)} not ACTIVE ({link})",
                       f"{gpu}'s own rail is down", "gpu_nic_down", nics=",".join(down))
    report.facts["affinity"] = affinity


def check_tcp_path(report: Report, inputs: RdmaInputs, require_rdma: bool) -> None:
    """No RDMA devices: say so plainly, then check what P2P will use instead (UCX over TCP)."""
    report.add("error" if require_rdma else "info", "no_rdma", "rdma", "no /sys/class/infiniband devices",
               "this host has no RDMA devices: NIXL/UCX will carry P2P transfers over TCP (and shared memory "
               "between processes on the same host)", "no_rdma" if require_rdma else "")
    real_up = [n.name for n in inputs.netdevs if n.up and n.name != "lo"]
    report.facts["interfaces"] = [{"name": n.name, "operstate": n.operstate, "mtu": n.mtu}
                                  for n in inputs.netdevs]
    if not real_up:
        report.add("warn", "tcp_path", "interfaces", "only lo is up", "", "only_loopback")
    else:
        report.add("info", "tcp_path", "interfaces", ",".join(real_up), "interfaces up for TCP transfers")
    if inputs.ucx_devices is not None:
        lanes = [t.label for t in inputs.ucx_devices.transports if t.transport == "tcp"]
        source = "ucx_info -d"
    elif inputs.nixl_lanes is not None:
        lanes = [lane for lane in inputs.nixl_lanes if lane.startswith("tcp/")]
        source = "NIXL agent (UCX_LOG_LEVEL=info)"
    else:
        report.add("info", "tcp_path", "ucx", "no ucx_info, NIXL not checked",
                   "cannot list UCX transports here; run `p2pctl probe-nixl` for a real transfer")
        return
    report.facts["ucx_tcp_lanes"] = lanes
    if lanes:
        report.add("info", "tcp_path", "ucx", f"{', '.join(lanes)} (from {source})", "UCX sees tcp transports")
    else:
        report.add("error", "tcp_path", "ucx", f"no tcp transport (from {source})", "", "no_tcp_transport")
