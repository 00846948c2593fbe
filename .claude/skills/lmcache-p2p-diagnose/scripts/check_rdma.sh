#!/usr/bin/env bash
# RDMA readiness of this host (p2pctl rdma): devices, ports, GIDs, uverbs, memlock, GPUDirect, GPU/NIC affinity.
# Without RDMA it says so and checks the TCP path instead.
# Exit codes: 0 healthy, 1 findings, 2 bad input or could not check.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  cat <<'USAGE'
usage: check_rdma.sh [--sysfs-root DIR | --root DIR] [--pid PID] [--require-rdma] [--json]

Reads /sys/class/infiniband (state, phys_state, link_layer, rate, GIDs, NUMA node), /dev/infiniband,
the memlock limit (of --pid, e.g. a running lmcache server, else this shell), loaded modules
(nvidia_peermem), `nvidia-smi topo -m` and `ucx_info -d`. Each finding names the device/port, the
value seen and the fix.

  --sysfs-root DIR   read DIR instead of /sys
  --root DIR         a captured snapshot tree: DIR/sys, DIR/dev, DIR/proc, DIR/tools/<fact>.txt
  --pid PID          check this process's locked-memory limit (/proc/PID/limits)
  --require-rdma     a host without RDMA devices is a finding (exit 1)
  --json             machine-readable report

Healthy output ends with "result: healthy".
USAGE
  exit 0
fi
# shellcheck source=SCRIPTDIR/p2pctl.sh
source "$(dirname "$0")/p2pctl.sh"
p2p_exec check_rdma.sh rdma "$@"
