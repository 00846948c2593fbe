"""Facts: read-only probes of a host, each a command (or file reads) plus a pure, fixture-tested parser.

Diagnose reads facts and never shells out itself. `node_facts` is the one table of what is read of a node as a
whole; a bundle runs every one of `COMMAND_FACTS` and keeps its raw output as `<name>.txt`, which
`RecordedRunner` replays. File facts take the directory standing in for `/sys`, `/dev` or `/proc`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from p2p_ops.facts.base import CommandFact, RecordedRunner, Runner, run_local
from p2p_ops.facts.gpus import GPUS
from p2p_ops.facts.ibverbs import IBV_DEVICES, IBV_DEVINFO, RDMA_LINK
from p2p_ops.facts.limits import LSMOD, ULIMIT_L
from p2p_ops.facts.listeners import LISTENERS, SESSIONS
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.python_env import python_env_fact
from p2p_ops.facts.storage import disk_fact, model_cache_fact
from p2p_ops.facts.sysfs_ib import SYSFS_IB
from p2p_ops.facts.topo import NVIDIA_SMI_TOPO
from p2p_ops.facts.ucx_info import UCX_INFO_DEVICES, UCX_INFO_VERSION


def parse_host(text: str) -> dict[str, str]:
    lines = [ln.strip() for ln in text.splitlines()]
    return {"hostname": lines[0] if lines else "", "kernel": lines[1] if len(lines) > 1 else ""}


# Which machine answered, and what a bundle keeps of its host (free text, not parsed).
HOST = CommandFact("host", ("sh", "-c", "hostname; uname -r"), parse_host)
HOST_TXT = CommandFact("host_txt", ("sh", "-c", "uname -a; hostname; nproc; ulimit -l"), str)

COMMAND_FACTS: tuple[CommandFact, ...] = (IBV_DEVINFO, IBV_DEVICES, RDMA_LINK, NVIDIA_SMI_TOPO, UCX_INFO_VERSION,
                                          UCX_INFO_DEVICES, ULIMIT_L, LSMOD)
# A command fact's label in `node_facts` where the verbs name it otherwise than the fact does.
_LABELS = {NVIDIA_SMI_TOPO.name: "topo", ULIMIT_L.name: "memlock"}
TOOL_LABELS = tuple(_LABELS.get(f.name, f.name) for f in COMMAND_FACTS)


def node_facts(labels: Iterable[str], python: str = "", run_dir: str = "", model: Optional[str] = None,
               vllm_python: str = "") -> dict[str, CommandFact]:
    """The facts of a node as a whole, read in one round trip (`sections.read_node`), by label; `p2pctl probe`,
    `doctor` and `bundle` each pick theirs. `python`, `vllm_python`: the node's interpreters (servers', vLLM's);
    `run_dir`: where the fleet's files go (its disk); `model`: a folder or hub id to find (None: nothing)."""
    every: dict[str, CommandFact] = {"host": HOST, "host_txt": HOST_TXT, "python": python_env_fact(python),
             "vllm_python": python_env_fact(vllm_python), "gpus": GPUS, "rdma": SYSFS_IB, "listeners": LISTENERS,
             "sessions": SESSIONS, "ipv4": IPV4_INTERFACES, "disk": disk_fact(run_dir),
             "model": model_cache_fact(model), **dict(zip(TOOL_LABELS, COMMAND_FACTS))}
    return {label: every[label] for label in labels}


def recorded_runner(directory: Path) -> RecordedRunner:
    return RecordedRunner(directory, {fact.argv: fact.name for fact in COMMAND_FACTS})


__all__ = ["COMMAND_FACTS", "CommandFact", "RecordedRunner", "Runner", "TOOL_LABELS", "node_facts", "parse_host",
           "recorded_runner", "run_local"]
