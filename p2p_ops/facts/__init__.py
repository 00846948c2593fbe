"""Facts: read-only probes of a host, each a command (or file reads) plus a pure, fixture-tested parser.

Diagnose reads facts and never shells out itself. Every runner returns the connectors' `Result`; a node's facts
are read in one round trip through its connector with `p2p_ops.facts.sections.read_node`. Command facts are listed in `COMMAND_FACTS` (a bundle can run
them all and keep the raw outputs under `<name>.txt`, which `RecordedRunner` replays); file facts take the
directory standing in for `/sys`, `/dev` or `/proc` so tests point them at fixture trees.
"""

from __future__ import annotations

from pathlib import Path

from p2p_ops.facts.base import CommandFact, RecordedRunner, Runner, run_local
from p2p_ops.facts.ibverbs import IBV_DEVICES, IBV_DEVINFO
from p2p_ops.facts.limits import LSMOD, ULIMIT_L
from p2p_ops.facts.rdma_link import RDMA_LINK
from p2p_ops.facts.topo import NVIDIA_SMI_TOPO
from p2p_ops.facts.ucx_info import UCX_INFO_DEVICES, UCX_INFO_VERSION

COMMAND_FACTS: tuple[CommandFact, ...] = (
    IBV_DEVINFO, IBV_DEVICES, RDMA_LINK, NVIDIA_SMI_TOPO, UCX_INFO_VERSION, UCX_INFO_DEVICES, ULIMIT_L, LSMOD,
)


def recorded_runner(directory: Path) -> RecordedRunner:
    """A runner that answers every fact in `COMMAND_FACTS` from `<directory>/<fact name>.txt`."""
    return RecordedRunner(directory, {fact.argv: fact.name for fact in COMMAND_FACTS})


__all__ = [
    "COMMAND_FACTS", "CommandFact", "RecordedRunner", "Runner", "recorded_runner", "run_local",
]
