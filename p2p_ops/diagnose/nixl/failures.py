"""Map a failed NIXL/UCX transfer to its likely cause and fix, from the exception and the UCX/NIXL log lines.

`classify(text)` tries `RULES` in order (specific before generic) against the exception (`Class: message`)
followed by the WARN/ERROR log messages, and returns the first match. Add a rule by appending one; its `cause`
may use the named groups of its pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (name, pattern, cause, fix)
RULES: tuple[tuple[str, str, str, str], ...] = (
    ("tls_without_cuda", r"Invalid UCX_TLS=(?P<tls>\S+) for NIXL UCX backend: NVIDIA GPU",
     "UCX_TLS={tls} has no cuda_copy/cuda while GPUs are present, and NIXL rejects it",
     "add cuda_copy (or cuda, which adds NVLink) to UCX_TLS, e.g. UCX_TLS=rc,sm,self,cuda_copy"),
    ("tls_caret", r"'\^' may only appear as the first",
     "UCX_TLS has '^' (deny-list) somewhere other than its first character",
     "write a deny-list as one leading '^', e.g. UCX_TLS=^cuda_ipc,gdr_copy"),
    ("tls_unavailable",
     r"transports? (?P<tls>'[^'\n]{1,200}'(?:,\s*'[^'\n]{1,200}')*) (?:is|are) not available, "
     r"please use one or more of: (?P<avail>[^\n]+)",
     "UCX_TLS asks for {tls}, which this UCX cannot use on this host (available: {avail})",
     "set UCX_TLS to transports from the available list (without RDMA: tcp,sm,self; with RDMA: rc,sm,self). "
     "rc/dc need rdma-core providers and /dev/infiniband; cuda_* need a CUDA-enabled UCX"),
    ("net_device_unavailable",
     r"network device '(?P<dev>[^'\n]{1,200})' is not available, please use one or more of: (?P<avail>[^\n]+)",
     "UCX_NET_DEVICES names {dev}, which UCX does not see here (available: {avail})",
     "set UCX_NET_DEVICES to devices from that list (RDMA ports as mlx5_0:1, TCP as the interface name), "
     "or unset it; `p2pctl rdma` shows which ports are ACTIVE"),
    ("no_am_transport", r"no active messages transport to",
     "the transport set leaves no way to send control (active) messages to the peer",
     "keep a control-capable transport in UCX_TLS (tcp, rc or sm together with self), and make sure "
     "UCX_NET_DEVICES does not filter them all out"),
    ("retry_exceeded", r"Transport retry count exceeded",
     "RDMA packets to the peer are not acknowledged: peer unreachable, wrong GID/route, or a lossy fabric",
     "check both ports are ACTIVE with an IPv4 RoCE v2 GID (`p2pctl rdma`), PFC/ECN on the switch, and "
     "that UCX_IB_GID_INDEX is auto"),
    # Atomic: commit to a line's first registration call, so a line of many calls is scanned once, not once each.
    ("memlock", r"(?m)^(?>[^\n]*?(?:ibv_create_cq|ibv_reg_mr|ibv_reg_dmabuf_mr))[^\n]*Cannot allocate memory"
     r"|RLIMIT_MEMLOCK",
     "memory registration failed: the locked-memory limit is too low",
     "run with `ulimit -l unlimited` (LimitMEMLOCK=infinity under systemd, --ulimit memlock=-1 in Docker)"),
    ("uverbs",
     r"ibv_open_device\([^)\n]{0,500}\) failed|Failed to open device|no userspace device-specific driver",
     "the RDMA device cannot be opened: /dev/infiniband not mapped in, or the provider library is missing",
     "expose /dev/infiniband to the container (with IPC_LOCK) and install the ibverbs provider (libmlx5)"),
    ("unreachable", r"Destination is unreachable|no connect to iface",
     "UCX cannot reach the peer over the selected devices (wrong/stale GID, no route, filtered device)",
     "check UCX_NET_DEVICES and UCX_IB_GID_INDEX=auto; both hosts need an IPv4 RoCE v2 GID / a route"),
    ("remote_disconnect", r"nixlRemoteDisconnectError|NIXL_ERR_REMOTE_DISCONNECT",
     "the peer agent went away or restarted, so its metadata is stale; NIXL does not self-heal",
     "restart the reader (or remove and re-add the remote agent) after the peer is back"),
    ("no_plugins", r"No plugins available for NIXL|Skipping backend registration UCX",
     "NIXL found no UCX plugin", "reinstall nixl-cu12==1.5.1 (+ the nixl meta package with --no-deps) and "
     "unset NIXL_PLUGIN_DIR unless it points at the wheel's plugins"),
    ("nixl_missing", r"No module named '?nixl",
     "NIXL is not installed in this Python", "install nixl-cu12==1.5.1 and nixl==1.5.1 (--no-deps)"),
    ("mismatch", r"data mismatch",
     "the READ completed but the bytes differ from the source",
     "a memory-registration or transport bug: retry with UCX_TLS=tcp to isolate the transport, then report"),
    ("timeout", r"TimeoutError|timed out",
     "the transfer or the peer did not finish in time (connection establishment hang)",
     "check UCX_NET_DEVICES names an interface both agents reach, no firewall drops UCX's ephemeral ports, "
     "and both sides use the same UCX_TLS"),
    ("backend", r"nixlBackendError|NIXL_ERR_BACKEND",
     "the UCX backend failed (see the UCX errors listed as evidence)",
     "fix what the UCX ERROR/WARN lines say; re-run with UCX_LOG_LEVEL=debug for more"),
)


@dataclass
class Diagnosis:
    rule: str
    cause: str
    fix: str


def classify(text: str) -> Diagnosis:
    for name, pattern, cause, fix in RULES:
        m = re.search(pattern, text)
        if m:
            return Diagnosis(name, cause.format(**{k: (v or "").strip() for k, v in m.groupdict().items()}), fix)
    return Diagnosis("unknown", "unrecognised failure", "read the exception and the UCX/NIXL lines above")
