"""The fleet spec's topology: nodes, their instances and ports, the coordinator, and the `Fleet` that holds them
with its settings sections (`spec.settings`) and the views derived from them (who runs where, which URL). Loading
a file and the checks that span fields are `spec.load`'s."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal, Optional

from pydantic import Field, field_validator

from p2p_ops.errors import BadInput
from p2p_ops.spec.layout import RESERVED_FOLDERS
from p2p_ops.spec.settings import (EngineSettings, InstanceSettings, PrometheusSettings, RouterSettings, Settings,
                                   StrictModel, VllmSettings, check_host, checked, hostport)

# Ids become file names and command arguments: keep them boring. Matched in full (`$` would let a trailing
# newline through), never `.`/`..` (a folder outside the run folder).
ID_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
# A hostname label's limit (RFC 1035), well inside a file name's 255 bytes: an instance's shm segment name
# `p2p_<fleet>_<instance>_<port>` holds two of them.
MAX_ID = 63


def _check_id(value: str) -> str:
    if len(value) > MAX_ID:
        raise ValueError(f"{value[:20]!r}... is {len(value)} characters long; use at most {MAX_ID} (it names "
                         "folders and files)")
    if not ID_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} may only contain letters, digits, '.', '_' and '-'")
    if value.strip(".") == "":
        raise ValueError(f"{value!r} is not a usable name: '.' and '..' are folders; pick a word")
    return value


class Coordinator(StrictModel):
    # Bind and advertised address. 127.0.0.1 by default: never 0.0.0.0 unless the spec says so.
    host: str = "127.0.0.1"
    # Node that runs it; empty = the first node whose address equals host, else the first node.
    node: str = ""
    port: int = Field(9300, ge=1, le=65535)
    # Must exceed the servers' heartbeat interval, or heartbeats fail (reference 1.1).
    timeout_keep_alive: int = Field(10, ge=1, le=3600)

    _host = checked(check_host, "host")


class Ports(StrictModel):
    mp: int = Field(..., ge=1, le=65535, description="ZMQ request port (lmcache server --port)")
    http: int = Field(..., ge=1, le=65535, description="server admin/metrics port (--http-port)")
    p2p: int = Field(..., ge=1, le=65535, description="transfer-channel port (--p2p-advertise-url)")
    engine: int = Field(..., ge=1, le=65535, description="engine OpenAI HTTP port")


class Instance(StrictModel):
    id: str
    ports: Ports
    gpu: Optional[int] = Field(None, ge=0, le=63)
    # vLLM on CPU: the cores its OpenMP threads bind to (VLLM_CPU_OMP_THREADS_BIND, e.g. "0-3"); empty = "auto".
    cpus: str = ""
    settings: InstanceSettings = Field(default_factory=InstanceSettings)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        # Folders the run layout itself uses next to the instances' folders: an instance of that name would
        # overwrite them (an instance `coordinator` would overwrite the coordinator's env.sh).
        if v.lower() in RESERVED_FOLDERS:
            raise ValueError(f"{v!r} is reserved for the run folder's own {v.lower()}/ folder; pick another id")
        return _check_id(v)


class Node(StrictModel):
    name: str
    address: str = "127.0.0.1"
    connection: Literal["local", "ssh"] = "local"
    # Where the project lives on that node; empty = this checkout / this interpreter (local).
    venv: str = ""
    # runtime: vllm: the venv holding vLLM on this node; empty = vllm.venv, else `venv`.
    vllm_venv: str = ""
    # Bind address for servers and engines. Empty = the node's address (127.0.0.1 for local nodes).
    bind: str = ""
    ssh_user: str = ""
    ssh_port: int = Field(22, ge=1, le=65535)
    ssh_key: str = ""
    ssh_config: str = ""
    # Only for test hosts whose keys are generated per run: never verify-off by default.
    ssh_insecure_host_keys: bool = False
    run_dir: str = ""
    instances: list[Instance] = Field(..., min_length=1)

    _name = checked(_check_id, "name")
    _address = checked(check_host, "address")
    _bind = checked(lambda v: check_host(v) if v else v, "bind")

    @property
    def bind_host(self) -> str:
        return self.bind or self.address


class Fleet(StrictModel):
    name: str
    runtime: Literal["embedded", "vllm"] = "embedded"
    model: str = "tiny-llm"
    coordinator: Coordinator = Field(default_factory=Coordinator)
    settings: Settings = Field(default_factory=Settings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)
    router: RouterSettings = Field(default_factory=RouterSettings)
    nodes: list[Node] = Field(..., min_length=1)
    # Optional key the engines require (`Authorization: Bearer`); every client of the toolkit sends it. It lives
    # in env.sh (0600) and is never printed; bundles redact it. Never echoed in errors (repr=False).
    api_key: str = Field("", repr=False)

    _name = checked(_check_id, "name")

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        # '@' is reserved inside LMCache object keys (reference 5.5).
        if not v or "@" in v:
            raise ValueError(f"{v!r} must be a non-empty model name without '@'")
        return v

    @property
    def all_loopback(self) -> bool:
        """Every process of the fleet binds and is reached on 127.0.0.0/8 (a local fleet, or a loopback testbed)."""
        return is_loopback(self.coordinator.host) and all(
            is_loopback(n.address) and is_loopback(n.bind_host) for n in self.nodes)

    def instances(self) -> list[tuple[Node, Instance]]:
        return [(node, inst) for node in self.nodes for inst in node.instances]

    def placed_instances(self) -> list[tuple[str, Node, Instance]]:
        """(its field path, e.g. `nodes[1].instances[0]`, node, instance) for every instance."""
        return [(f"nodes[{ni}].instances[{ii}]", node, inst) for ni, node in enumerate(self.nodes)
                for ii, inst in enumerate(node.instances)]

    def instance(self, instance_id: str) -> tuple[Node, Instance]:
        for node, inst in self.instances():
            if inst.id == instance_id:
                return node, inst
        known = ", ".join(i.id for _, i in self.instances())
        raise BadInput(f"no instance {instance_id!r} in fleet {self.name!r} (known: {known})")

    def effective_settings(self, inst: Instance) -> Settings:
        overrides = inst.settings.model_dump(exclude_none=True)
        return self.settings.model_copy(update=overrides)

    def shm_name(self, inst: Instance) -> str:
        """The --shm-name of the instance's server ("" = pickled tensors). The port keeps it unique among
        fleets on one host: a server unlinks any segment of its name at start."""
        return f"p2p_{self.name}_{inst.id}_{inst.ports.mp}" if self.effective_settings(inst).shm_transport else ""

    def named_node(self, field: str, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise BadInput(f"{field}: no node named {name!r}; use one of " + ", ".join(n.name for n in self.nodes))

    def coordinator_node(self) -> Node:
        if self.coordinator.node:
            return self.named_node("coordinator.node", self.coordinator.node)
        for node in self.nodes:
            if host_key(node.address) == host_key(self.coordinator.host):
                return node
        return self.nodes[0]

    @property
    def coordinator_url(self) -> str:
        return f"http://{hostport(self.coordinator.host, self.coordinator.port)}"

    def router_node(self) -> Node:
        return self.named_node("router.node", self.router.node) if self.router.node else self.coordinator_node()

    @property
    def router_url(self) -> str:
        return f"http://{hostport(self.router_node().address, self.router.port)}"

    @property
    def kv_block_size(self) -> int:
        """The engines' KV block size (vLLM's or the embedded engine's)."""
        return self.vllm.effective_block_size() if self.runtime == "vllm" else self.engine.block_size

    @property
    def kv_events_on(self) -> bool:
        return self.router.enabled and self.router.kv_events

    def kv_event_ports_of(self, inst_id: str) -> tuple[int, int]:
        """(PUB, replay) ports of one instance's KV events: router.kv_event_ports of its place in the fleet."""
        return self.router.kv_event_ports([i.id for _, i in self.instances()].index(inst_id))

    def kv_replay_url(self, node: Node, inst_id: str) -> str:
        return f"tcp://{hostport(node.address, self.kv_event_ports_of(inst_id)[1])}"


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def host_key(address: str) -> str:
    # localhost and 127.0.0.1 are one host.
    return "127.0.0.1" if address == "localhost" else address
