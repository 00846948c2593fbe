"""RDMA readiness of one host: can NIXL/UCX move KV over RDMA here, and if not, why.

`p2p_ops.diagnose.rdma.inputs.gather_rdma(host)` reads facts (sysfs, /dev, /proc, `nvidia-smi topo -m`,
`ucx_info -d`); `check_rdma(inputs)` is pure and returns a `Report`. Port checks live here; host-wide checks (uverbs, memlock, GPUDirect, GPU/NIC
affinity, the TCP fallback) live in `p2p_ops.diagnose.rdma.host_checks`. Each finding names the device/port, the value
and the fix; fix texts live in `p2p_ops.diagnose.fixes` so the CLI, docs and tests share one wording.
"""

from __future__ import annotations

from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.fixes import FIXES
from p2p_ops.diagnose.rdma import host_checks as rdma_host
from p2p_ops.diagnose.rdma.inputs import RdmaInputs, gather_rdma
from p2p_ops.facts.ib_model import IbDevice, IbPort, gid_ipv4

__all__ = ["RdmaInputs", "check_rdma", "gather_rdma"]


def _port_row(dev: IbDevice, port: IbPort) -> dict:
    v4 = port.roce_v2_ipv4_gids()
    netdev = next((g.ndev for g in port.gids if g.ndev), ",".join(dev.netdevs))
    return {
        "device": dev.name, "port": port.port, "state": port.state, "phys_state": port.phys_state,
        "link_layer": port.link_layer, "rate": port.rate, "numa_node": dev.numa_node, "netdev": netdev,
        "roce_v2_ipv4_gid": f"{v4[0].index} ({gid_ipv4(v4[0].gid)})" if v4 else "",
    }


def _check_state(report: Report, subject: str, port: IbPort) -> None:
    value = f"state {port.state or '?'}, phys_state {port.phys_state or '?'}, rate {port.rate or '?'}"
    if port.state == "INIT" and port.link_layer != "Ethernet":
        report.add("error", "port_state", subject, f"{value}, sm_lid {port.sm_lid or '?'}",
                   "link is up but the port is INIT: no subnet manager has configured it", FIXES["no_sm"])
    elif port.state == "ARMED":
        report.add("warn", "port_state", subject, value, "port ARMED: subnet manager mid-configuration",
                   FIXES["armed"])
    elif port.phys_state.lower() == "polling":
        report.add("error", "port_state", subject, value, "port DOWN and polling: no link partner",
                   FIXES["polling"])
    elif port.phys_state.lower() == "disabled":
        report.add("error", "port_state", subject, value, "port DOWN: disabled", FIXES["disabled"])
    else:
        report.add("error", "port_state", subject, value, f"port is {port.state or 'in an unknown state'}",
                   FIXES["port_down"])


def _check_roce_gid(report: Report, subject: str, dev: IbDevice, port: IbPort) -> None:
    v4 = port.roce_v2_ipv4_gids()
    ndev = next((g.ndev for g in port.gids if g.ndev), dev.netdevs[0] if dev.netdevs else "<netdev>")
    if not v4:
        seen = ", ".join(f"{g.index}:{g.gid} {g.type}".strip() for g in port.gids) or "no GIDs"
        report.add("error", "roce_gid", subject, seen,
                   "RoCE port has no RoCE v2 GID with an IPv4 address: UCX fails with 'Destination is "
                   "unreachable' or picks a link-local GID", FIXES["no_ipv4_gid"].format(ndev=ndev))
    elif all(g.index != 3 for g in v4):
        report.add("info", "roce_gid", subject, f"index {v4[0].index} = {gid_ipv4(v4[0].gid)}",
                   "the IPv4 RoCE v2 GID is not at index 3", FIXES["gid_index"].format(index=v4[0].index))


def check_ports(report: Report, inputs: RdmaInputs) -> None:
    rows = []
    for dev in inputs.devices:
        if not dev.ports:
            report.add("error", "port_state", dev.name, "no ports", "device has no ports in sysfs",
                       FIXES["port_down"])
        for port in dev.ports:
            subject = f"{dev.name}/{port.port}"
            rows.append(_port_row(dev, port))
            if not port.active:
                _check_state(report, subject, port)
            elif port.link_layer == "Ethernet":
                _check_roce_gid(report, subject, dev, port)
    report.facts["ports"] = rows
    active = sum(1 for r in rows if r["state"] == "ACTIVE")
    report.add("info", "ports", "rdma", f"{active}/{len(rows)} ports ACTIVE",
               f"{len(inputs.devices)} RDMA device(s), {active} of {len(rows)} port(s) active")


def check_rdma(inputs: RdmaInputs, require_rdma: bool = False) -> Report:
    """Pure: the readiness report for the gathered inputs."""
    report = Report("RDMA readiness")
    if not inputs.devices:
        rdma_host.check_tcp_path(report, inputs, require_rdma)
        return report
    check_ports(report, inputs)
    rdma_host.check_uverbs(report, inputs)
    rdma_host.check_memlock(report, inputs)
    rdma_host.check_gpudirect(report, inputs)
    rdma_host.check_affinity(report, inputs)
    return report
