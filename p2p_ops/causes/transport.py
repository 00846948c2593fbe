"""The catalogue, part 2: how KV moves between nodes (UCX_TLS, NIXL and UCX failures, the RDMA stack, NIC pins and
rails, memlock), as the doctor, `rdma`, `probe-nixl`, `ucx-trace`, `rails` and the tree's log signatures name it."""

from __future__ import annotations

from p2p_ops.causes.verdict import Cause as C

PROBE = "prove a list first with `p2pctl probe-nixl --tls LIST`"
READ_TTL = 'bound what stale locks pin with settings.server_extra_args: ["--l1-read-ttl-seconds", "60"]'

CAUSES = (
    # --- UCX_TLS and what UCX/NIXL refuse ---
    C("tls_unavailable", "instance", "UCX_TLS names transports this UCX build or host cannot use (RDMA ones without "
      "an RDMA device, only GPU ones for LMCache's host-DRAM L1): NIXL fails with NIXL_ERR_BACKEND",
      "set UCX_TLS (a fleet's settings.ucx_tls) to transports the node has: rc,sm,self on RDMA fabrics, tcp,sm,self "
      f"without RDMA (adding cuda_copy on GPU nodes), or leave it unset (or fix the RDMA stack: `p2pctl rdma`); {PROBE}"),
    C("tls_no_network", "instance", "UCX_TLS leaves no transport between hosts (no tcp, rc, ud or dc; or ^tcp on a "
      "node without RDMA)", "add rc (RDMA) or tcp to settings.ucx_tls (drop ^tcp where the node has no RDMA NIC), "
      "re-render and restart"),
    C("tls_without_cuda", "instance", "the node has GPUs and UCX_TLS enables no CUDA transport: NIXL (>= 1.5.1) "
      "refuses it at start ('Invalid UCX_TLS=... NVIDIA GPU(s) are present', NIXL PR #1617)",
      "add cuda_copy (rc,sm,self,cuda_copy on RDMA, tcp,sm,self,cuda_copy without) or use a deny-list such as "
      "^cuda_ipc, in settings.ucx_tls; re-render and restart"),
    C("tls_caret", "instance", "'^' may only start UCX_TLS (a deny-list): NIXL refuses it anywhere else",
      "write a deny-list as one leading ^ (^cuda_ipc,gdr_copy) or an allow-list, in settings.ucx_tls"),
    C("tls_cuda_without_gpu", "node", "UCX_TLS lists CUDA transports on a node without a GPU: they carry nothing, "
      "and cuda_copy alone lowers throughput (openucx/ucx#11652)",
      "on a GPU-less node drop cuda_copy/cuda_ipc: rc,sm,self (RDMA) or tcp,sm,self"),
    C("net_device_unavailable", "instance", "UCX_NET_DEVICES names a device UCX does not see on this host",
      "set UCX_NET_DEVICES to a device of UCX's list (RDMA ports as mlx5_0:1, TCP as the interface name) or unset "
      "it; `p2pctl rdma` shows which ports are ACTIVE"),
    C("no_am_transport", "instance", "the transport set leaves no way to send control (active) messages to the peer",
      "keep a control-capable transport in UCX_TLS (tcp, rc or sm, with self), and make sure UCX_NET_DEVICES does "
      "not filter them all out"),
    C("ucx_backend_failed", "instance", "UCX refused to create NIXL's backend or to register memory",
      "fix what the UCX ERROR/WARN lines before it say (`p2pctl ucx-trace` groups them); rerun with "
      "UCX_LOG_LEVEL=debug for more", rank=2),
    C("ucx_unreachable", "instance", "UCX cannot reach the peer over the selected devices (a wrong or stale GID, no "
      "route, a filtered device)", "check UCX_NET_DEVICES and that UCX_IB_GID_INDEX is auto; both hosts need an "
      "IPv4 RoCE v2 GID or a route"),
    C("transport_retry", "instance", "UCX lost the peer: RDMA packets are not acknowledged or the endpoint timed out "
      "(peer unreachable, wrong GID or route, a lossy fabric, PFC)", "check that both ports are ACTIVE with an IPv4 "
      "RoCE v2 GID (`p2pctl rdma` on both nodes), PFC/ECN on the switch, and UCX_IB_GID_INDEX auto", rank=2),
    C("remote_disconnect", "instance", "a peer died or restarted while this server pulled from it; NIXL keeps the "
      "stale agent and does not heal by itself", "restart the reading server once the peer is back: {restart} "
      "(lower --p2p-lookup-timeout / --p2p-load-timeout if stalls must be short)", rank=2),
    C("ucx_error", "instance", "UCX or NIXL logged an error that no signature of this toolkit recognises",
      "read the line and the ones before it; rerun with UCX_LOG_LEVEL=debug for more", rank=1, confirmed=False),
    C("nixl_no_plugins", "node", "NIXL found no UCX plugin", "reinstall nixl-cu12==1.5.1 (+ the nixl meta package "
      "with --no-deps) and unset NIXL_PLUGIN_DIR unless it points at the wheel's plugins"),
    C("read_mismatch", "run", "a NIXL READ completed but its bytes differ from the source",
      "a memory-registration or transport bug: retry with UCX_TLS=tcp to isolate the transport, then report it"),
    C("transfer_timeout", "run", "the transfer or the peer did not finish in time (a connection that hangs)",
      "check that UCX_NET_DEVICES names an interface both agents reach, that no firewall drops UCX's ephemeral "
      "ports, and that both sides use the same UCX_TLS"),
    C("payload_not_rdma", "instance", "the KV payload between hosts does not move by RDMA (TCP, or RMA emulated over "
      "active messages)", "check `p2pctl rdma`, include rc (or dc) in UCX_TLS and the RDMA ports in "
      "UCX_NET_DEVICES"),
    C("no_ucx_trace", "instance", "no UCX endpoint line in the server logs, so which lanes UCX chose is unknown",
      "set UCX_LOG_LEVEL=info and UCX_PROTO_INFO=y in env.sh, restart, pull once, and read the lanes "
      "(`p2pctl ucx-trace`)", rank=-1, confirmed=False),
    # --- the RDMA stack of a host ---
    C("no_rdma", "node", "the node has no RDMA device (none in /sys/class/infiniband, or hidden from the container): "
      "NIXL/UCX moves KV over TCP (~1 GB/s per stream)", "install the NIC driver and rdma-core (or pass "
      "/dev/infiniband into the container), then `p2pctl rdma`; or run P2P over TCP on purpose (UCX_TLS=tcp,sm,self)",
      rank=1),
    C("port_no_sm", "node", "the RDMA port is up but no subnet manager has configured it (INIT), or one is still "
      "configuring it (ARMED)", "start a subnet manager on this fabric (`systemctl start opensm` on one node, or the "
      "switch's SM) or give it a minute; the port turns ACTIVE within seconds"),
    C("port_down", "node", "the RDMA port is down (no link partner, disabled, or another state)", "bring it up: the "
      "cable, transceiver and switch port (`ibstat`, `rdma link`), `ibportstate` or the switch for a disabled port, "
      "`ip link set <netdev> up` for RoCE"),
    C("no_ipv4_gid", "node", "the RoCE port has no RoCE v2 GID with an IPv4 address: UCX fails with 'Destination is "
      "unreachable' or picks a link-local GID", "give {netdev} an IPv4 address (`ip addr add A.B.C.D/NN dev "
      "{netdev}`, interface up, right VLAN): the kernel then adds a RoCE v2 GID ::ffff:A.B.C.D; keep "
      "UCX_IB_GID_INDEX=auto"),
    C("gid_index", "node", "the IPv4 RoCE v2 GID is not at index 3", "do not hard-code "
      "UCX_IB_GID_INDEX/NCCL_IB_GID_INDEX=3; leave it auto or use {index}", rank=-1),
    C("no_uverbs", "node", "the RDMA devices cannot be opened: /dev/infiniband is not mapped into the container, or "
      "the provider library is missing", "expose them (`--device /dev/infiniband` in Docker, the RDMA shared-device "
      "plugin in Kubernetes, with capability IPC_LOCK) and install the ibverbs provider (libmlx5)"),
    C("uverbs_module", "node", "the verbs user-space interface is not loaded",
      "`modprobe ib_uverbs` (and `rdma_ucm`)"),
    C("memlock", "node", "locked memory is limited: RDMA registration of the L1 fails with 'Cannot allocate memory' "
      "(ibv_reg_mr / ibv_create_cq)", "start the server with unlimited locked memory: `ulimit -l unlimited` in the "
      "launching shell (needs the hard limit or root), LimitMEMLOCK=infinity in a systemd unit, `--ulimit "
      "memlock=-1` for Docker"),
    C("no_peermem", "node", "GPUDirect RDMA is unavailable: GPU memory is staged through host memory",
      "`modprobe nvidia_peermem`, or use DMA-BUF (UCX >= 1.14, rdma-core >= 41, CUDA >= 11.7); LMCache keeps L1 in "
      "host DRAM, so server-to-server P2P does not need it, VRAM NIXL buffers do"),
    C("gpu_nic_far", "node", "a GPU has no NIC on its PCIe switch: transfers cross the host bridge",
      "give each GPU's process the NIC on its own PCIe switch: UCX_NET_DEVICES=<nic>:1 (the closest NICs per GPU "
      "are listed under facts.affinity)"),
    C("gpu_nic_down", "node", "a GPU's nearest NICs are not ACTIVE, so its traffic crosses to a farther NIC",
      "fix {nics} (see the port finding) or point UCX_NET_DEVICES at a healthy nearby NIC"),
    C("only_loopback", "node", "no interface but lo is up: peers on other hosts cannot reach this one",
      "bring up the data interface (`ip link set <if> up`) and give it an address"),
    C("no_tcp_transport", "node", "UCX lists no tcp transport, so transfers have no path without RDMA",
      "check that UCX_TLS includes tcp and UCX_NET_DEVICES names an interface that is up (`ucx_info -d | grep -A3 "
      "'Transport: tcp'`)"),
    # --- NIC pins and rails ---
    C("nic_pin", "instance", "the server's UCX_NET_DEVICES is not its NIC plan's (a down port, another NUMA node "
      "than its L1, TCP while RDMA ports are active, fewer rails than the plan, or an interface peers cannot reach)",
      "give {instance} UCX_NET_DEVICES={devices} UCX_MAX_RMA_RAILS={rails} ({why}): unset its "
      "settings.ucx_net_devices in fleet.yaml so render writes the plan, or set it to that; then restart the "
      "server(s) of {node}: {restart}"),
    C("single_rail", "instance", "UCX_NET_DEVICES names one device or UCX_MAX_RMA_RAILS is 1: one NIC (or TCP) "
      "carries what several could", "UCX_NET_DEVICES=all (or every GPU-local NIC) and UCX_MAX_RMA_RAILS=2..8 "
      "(NIXL's default is 2, LMCache's example 8), with UCX_TLS=rc,sm,self"),
    C("rail_imbalance", "node", "a rail carried far less than the busiest one, or an interface that is not an "
      "expected rail carried traffic", "pin UCX to the rails: UCX_NET_DEVICES={rails}, with UCX_MAX_RMA_RAILS / "
      "UCX_MAX_RNDV_RAILS raised to their count; check each port's state and NUMA affinity"),
    C("rail_missing", "node", "an expected interface has no counters on this host",
      "check the name against `ls /sys/class/infiniband /sys/class/net` (RDMA ports as mlx5_0:1)"),
    C("rails_idle", "node", "the expected rails carried (almost) nothing during the window",
      "check that the transfer ran during the window and UCX picked these rails (UCX_LOG_LEVEL=info)"),
    C("rail_counter_reset", "node", "a rail's counter went backwards (reset or wrapped): its bytes are unknown",
      "run the rail check again", rank=-1),
    C("slow_fabric", "node", "pulls run far below what the planned NICs promise while the pin matches the plan: the "
      "fabric itself (TCP fallback, PFC, a wrong GID), L1 registrations over 4 GiB (~55 % of line rate, LMCache PR "
      "#4432), or CPU contention", "compare `p2pctl bench transfer` (or `p2pctl probe-nixl --size 64M`) with the "
      "NICs' line rate; `p2pctl rdma` on both nodes", rank=2, confirmed=False),
    # --- L1 pressure and locks on an owner ---
    C("l1_full", "instance", "L1 sits at its eviction watermark: it evicts continuously and cannot host restore "
      "buffers", "raise settings.l1_size_gb (per instance if needed) or send fewer long prompts at once", rank=2),
    C("stale_read_locks", "instance", "L1 objects stay read-locked, or owner-side lookup jobs are held, with nothing "
      "in flight: abandoned lookups keep chunks locked until --l1-read-ttl-seconds (300 s), so they can be neither "
      "evicted nor overwritten (l1_oom / l1_contended on peers)",
      f"wait out the read TTL, or restart the server if they never drain at idle: {{restart}}; {READ_TTL}", rank=2),
    C("lookup_leak", "instance", "P2P lookup jobs held on an owner with no requester waiting: lmcache 0.5.6 keeps a "
      "job until its requester queries it (p2p_controller.py, no time limit; see the review of LMCache PR #3740), "
      "and one that gave up never does, so the jobs never leave and their read locks pin L1",
      f"restart the server to drop them (its L1 cache is lost): {{restart}}; {READ_TTL}"),
)
