"""Host-wide RDMA readiness checks: uverbs device nodes, memlock, GPUDirect, GPU/NIC affinity, TCP fallback.

Each function takes the `Report` to add to and the gathered `RdmaInputs` (`p2p_ops.diagnose.rdma.inputs`); all
are pure.
"""

from __future__ import annotations

from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.fixes import FIXES
from p2p_ops.diagnose.rdma.inputs import RdmaInputs
from p2p_ops.facts.limits import PEERMEM_MODULES
from p2p_ops.facts.topo import LINK_RANK

# An L1 of several GiB is registered in one piece, so anything short of unlimited is a latent failure.
MEMLOCK_MIN_BYTES = 1 << 40


def check_uverbs(report: Report, inputs: RdmaInputs) -> None:
    uverbs_nodes = [n for n in inputs.dev_nodes if n.startswith("uverbs")]
    if not inputs.dev_nodes:
        names = ", ".join(d.name for d in inputs.devices)
        report.add("error", "uverbs", "/dev/infiniband", "missing",
                   f"RDMA devices are visible in sysfs ({names}) but /dev/infiniband is absent: verbs cannot "
                   "open them ('Failed to open device')", FIXES["no_uverbs"])
        return
    if not inputs.uverbs_class_present:
        report.add("error", "uverbs", "ib_uverbs", "no /sys/class/infiniband_verbs",
                   "the verbs user-space interface is not loaded", FIXES["uverbs_module"])
        return
    by_dev = {ibdev: node for node, ibdev in inputs.uverbs.items()}
    for dev in inputs.devices:
        node = by_dev.get(dev.name)
        if node is None or node not in uverbs_nodes:
            report.add("error", "uverbs", dev.name, node or "no uverbs device",
                       f"{dev.name} has no usable /dev/infiniband/{node or 'uverbsN'}", FIXES["no_uverbs"])


def check_memlock(report: Report, inputs: RdmaInputs) -> None:
    mem = inputs.memlock
    if mem.error:
        report.add("warn", "memlock", "memlock", mem.error, "could not read the locked-memory limit",
                   FIXES["memlock"])
    elif not mem.unlimited and (mem.soft or 0) < MEMLOCK_MIN_BYTES:
        report.add("error", "memlock", mem.source, f"soft {mem.soft} bytes, hard {mem.hard or 'unlimited'}",
                   "locked memory is limited: registering the L1 buffer for RDMA fails with 'Cannot allocate "
                   "memory' (ibv_reg_mr / ibv_create_cq)", FIXES["memlock"])


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
        report.add("warn", "gpudirect", "gpu", "no nvidia_peermem module, no dmabuf memory type",
                   "GPUDirect RDMA unavailable: GPU memory is staged through host memory",
                   FIXES["peermem"])


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
            report.add("warn", "affinity", gpu, f"closest NIC(s) {','.join(nics)} via {link}",
                       f"{gpu} has no NIC on its PCIe switch: transfers cross the host bridge",
                       FIXES["affinity"])
        down = [n for n in nics if n in known and n not in active]
        if down and len(down) == len(nics):
            report.add("error", "affinity", gpu, f"nearest NIC(s) {','.join(down)} not ACTIVE ({link})",
                       f"{gpu}'s own rail is down",
                       FIXES["nic_down"].format(gpu=gpu, nics=",".join(down)))
    report.facts["affinity"] = affinity


def check_tcp_path(report: Report, inputs: RdmaInputs, require_rdma: bool) -> None:
    """No RDMA devices: say so plainly, then check what P2P will use instead (UCX over TCP)."""
    report.add("error" if require_rdma else "info", "no_rdma", "rdma", "no /sys/class/infiniband devices",
               "this host has no RDMA devices: NIXL/UCX will carry P2P transfers over TCP (and shared memory "
               "between processes on the same host)", FIXES["require_rdma"] if require_rdma else "")
    real_up = [n.name for n in inputs.netdevs if n.up and n.name != "lo"]
    report.facts["interfaces"] = [{"name": n.name, "operstate": n.operstate, "mtu": n.mtu}
                                  for n in inputs.netdevs]
    if not real_up:
        report.add("warn", "tcp_path", "interfaces", "only lo is up",
                   "no non-loopback interface is up", FIXES["only_loopback"])
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
        report.add("error", "tcp_path", "ucx", f"no tcp transport (from {source})",
                   "UCX lists no tcp transport, so transfers have no path", FIXES["no_tcp"])
