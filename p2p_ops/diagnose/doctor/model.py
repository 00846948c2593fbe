"""What the doctor knows about a fleet: per instance, per node and fleet-wide facts, as gathered."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from pydantic import TypeAdapter

from p2p_ops.facts.ib_model import IbDevice
from p2p_ops.facts.listeners import Listener
from p2p_ops.facts.reach import Reach
from p2p_ops.spec.units import PlannedPort

__all__ = ["FleetFacts", "InstanceFacts", "NodeFacts", "PlannedPort", "Reach"]


@dataclass
class InstanceFacts:
    instance: str
    node: str
    address: str
    env_file: Optional[dict[str, str]] = None      # parsed env.sh; None: no file
    env_file_rendered: bool = False                # env_file is the spec's rendering (no env.sh on disk)
    env_foreign: list[str] = field(default_factory=list)   # env.sh lines p2pctl does not render ("line N: ...")
    spec_env: Optional[dict[str, str]] = None      # what fleet.yaml renders for this env.sh now (same filter)
    server_state: str = "unknown"                  # running | dead | stale | none | unknown
    engine_state: str = "unknown"
    pid: Optional[int] = None
    process_env: dict[str, Optional[str]] = field(default_factory=dict)
    engine_env: dict[str, Optional[str]] = field(default_factory=dict)
    engine_flags: dict[str, str] = field(default_factory=dict)   # vLLM's must-agree flags; kv_events
    engine_health: str = "unknown"                 # healthy | degraded | no answer (a running engine)
    engine_log: list[str] = field(default_factory=list)    # its recent LMCache-link lines
    lookup_samples: list[dict] = field(default_factory=list)   # /status in-flight counts over a short window
    memlock: Optional[dict] = None                 # facts.limits.Memlock as a dict
    status: Optional[dict] = None                  # raw /status; None: no answer
    config: Optional[dict] = None                  # raw /config
    lmc_version: Optional[str] = None
    none_hash: Optional[str] = None
    # The algorithm LMCache could not load from vLLM ("Could not load 'builtin' from vLLM. Using builtin hash"):
    # the server really hashes with Python's hash(), whatever its settings say.
    hash_fallback: Optional[str] = None
    gpu: Optional[int] = None                      # the spec's GPU index (the NIC plan's anchor)
    start_log: list[str] = field(default_factory=list)   # a dead server's last lines matching a start-up refusal

    @property
    def running(self) -> bool:
        return self.server_state == "running"


@dataclass
class NodeFacts:
    node: str
    address: str
    error: Optional[str] = None
    packages: dict[str, Optional[str]] = field(default_factory=dict)
    mooncake: str = ""                  # why its servers cannot start on mooncake_te ("" when they can)
    rdma_devices: Optional[int] = None
    rdma: list[IbDevice] = field(default_factory=list)
    topo_text: str = ""                            # `nvidia-smi topo -m` as read ("" without nvidia-smi)
    ipv4: dict[str, str] = field(default_factory=dict)   # address -> interface (`ip -o -4 addr show`)
    listeners: list[Listener] = field(default_factory=list)
    reach: list[Reach] = field(default_factory=list)
    # pid -> session id of every process on the node; a fleet process leads its own session (setsid), so a
    # listener belongs to the fleet when its pid's session is one of the fleet's pids (children included).
    sessions: dict[int, int] = field(default_factory=dict)
    fleet_pids: dict[int, str] = field(default_factory=dict)   # session leader pid -> process name
    bind_ok: tuple[str, ...] = ()                                # addresses a fleet process may listen on
    proc_binds: dict[str, tuple[str, ...]] = field(default_factory=dict)   # process name -> more it may use


@dataclass
class FleetFacts:
    fleet: str
    runtime: str
    coordinator_url: str
    coordinator_node: str
    coordinator_state: str = "unknown"
    coordinator_env: Optional[dict[str, str]] = None
    coordinator_spec_env: Optional[dict[str, str]] = None   # what fleet.yaml renders for the coordinator's env.sh
    coordinator_healthy: bool = False
    coordinator_instances: Optional[list[dict]] = None
    instances: list[InstanceFacts] = field(default_factory=list)
    nodes: list[NodeFacts] = field(default_factory=list)
    ports: list[PlannedPort] = field(default_factory=list)   # units.port_plan(fleet)
    proc_states: dict[str, str] = field(default_factory=dict)
    kv_events_expected: bool = False    # a router reads the engines' KV events (router.enabled and kv_events)
    lookup_timeout_s: float = 30.0      # the requesters' --p2p-lookup-timeout (the spec's setting)
    transfer_engine: str = "nixl"       # settings.transfer_engine
    router_url: str = ""                # "" without router.enabled
    router_node: str = ""
    router_state: str = "unknown"       # its process, as procs.states reads it
    router_healthy: bool = False        # GET /health answered 200

    @property
    def multi_host(self) -> bool:
        return len({n.address for n in self.nodes}) > 1

    @property
    def any_running(self) -> bool:
        return self.coordinator_state == "running" or any(i.running for i in self.instances)

    def node(self, name: str) -> Optional[NodeFacts]:
        return next((n for n in self.nodes if n.node == name), None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> FleetFacts:
        """Facts as `to_dict` wrote them (a bundle's doctor.json, a captured case), rebuilt and type-checked:
        pydantic.ValidationError names the first field that is not what the doctor writes."""
        return TypeAdapter(cls).validate_python(data)


