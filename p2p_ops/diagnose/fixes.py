"""Fix texts for RDMA readiness findings, in one place so the CLI, docs and tests share one wording.

Keys are stable identifiers; `{placeholders}` are filled by the check that raises the finding.
"""

from __future__ import annotations

FIXES = {
    "no_sm": "start a subnet manager on this fabric (`systemctl start opensm` on one node, or enable the "
             "switch's SM); the port turns ACTIVE within seconds",
    "armed": "the subnet manager is still configuring this port; re-check in a minute, else restart the SM",
    "polling": "no link partner: check the cable/transceiver and the switch port (`ibstat`, `rdma link`); "
               "for RoCE also `ip link set <netdev> up`",
    "disabled": "the port is administratively disabled: enable it on the switch or with `ibportstate`",
    "port_down": "bring the port up (cable, switch port, `ip link set <netdev> up` for RoCE) and re-run",
    "no_ipv4_gid": "give {ndev} an IPv4 address (`ip addr add A.B.C.D/NN dev {ndev}`, interface up, right "
                   "VLAN); the kernel then adds a RoCE v2 GID ::ffff:A.B.C.D. Keep UCX_IB_GID_INDEX=auto",
    "gid_index": "do not hard-code UCX_IB_GID_INDEX/NCCL_IB_GID_INDEX=3; leave it `auto` or use {index}",
    "no_uverbs": "expose the RDMA devices to this container: `--device /dev/infiniband` (Docker) or the RDMA "
                 "shared-device plugin (Kubernetes), plus capability IPC_LOCK",
    "uverbs_module": "load the verbs user-space interface: `modprobe ib_uverbs` (and `rdma_ucm`)",
    "memlock": "start the server with unlimited locked memory: `ulimit -l unlimited` in the launching shell "
               "(needs the hard limit or root), `LimitMEMLOCK=infinity` in a systemd unit, "
               "`--ulimit memlock=-1` for Docker",
    "peermem": "`modprobe nvidia_peermem`, or use DMA-BUF (UCX >= 1.14, rdma-core >= 41, CUDA >= 11.7). "
               "LMCache keeps L1 in host DRAM, so server-to-server P2P does not need it; VRAM NIXL buffers do",
    "affinity": "give each GPU's process the NIC on its own PCIe switch: UCX_NET_DEVICES=<nic>:1 "
                "(closest NICs per GPU are listed under facts.affinity)",
    "nic_down": "{gpu}'s nearest NIC is not ACTIVE, so its traffic crosses to a farther NIC: fix {nics} "
                "(see the port finding) or point UCX_NET_DEVICES at a healthy nearby NIC",
    "only_loopback": "no non-loopback interface is up: peers on other hosts cannot reach this one; bring up the "
                     "data interface (`ip link set <if> up`) and give it an address",
    "no_tcp": "UCX lists no tcp transport: check UCX_TLS includes tcp and UCX_NET_DEVICES names an interface "
              "that is up (`ucx_info -d | grep -A3 'Transport: tcp'`)",
    "require_rdma": "this host has no RDMA device: install the NIC driver and rdma-core, or run P2P over TCP "
                    "(slower: ~1 GB/s per stream) by dropping the RDMA requirement",
}
