"""What every unit runs, built once here: its environment and command line; env.sh and the start wrappers are
rendered from them, and `up --dry-run` shows them (never by reading a file back).

env.sh is `export KEY=<shlex-quoted value>` lines (plus, on an SSH node without pinned devices, the lookup of
the interface that holds its address, the one value known only at start); each wrapper sources env.sh and runs
its command line, each word written out or taken from env.sh (`Ref`: `"$LMCACHE_CHUNK_SIZE"`), so bash runs
exactly `command(role)` from the rendered files, and that is what the dry run prints.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.lifecycle.nic_plan import InstancePlan
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.layout import COORDINATOR, ROUTER, RunLayout
from p2p_ops.spec.model import Fleet, Instance, Node, hostport
from p2p_ops.spec.settings import MOONCAKE_PORTS, Settings


@dataclass(frozen=True)
class RenderedFile:
    node: str       # node that uses the file
    unit: str       # instance id or "coordinator": the folder it lives in
    name: str       # file name inside that folder
    text: str
    executable: bool


@dataclass(frozen=True)
class Ref:
    """A word the wrapper takes from env.sh (`"$KEY"`, then a literal tail), as it always has: a value edited in
    env.sh reaches the command line, and the dry run shows it as a diff of env.sh."""

    key: str
    tail: str = ""


Word = Union[str, Ref]


@dataclass
class FolderRun:
    node: str
    folder: str
    title: str                                       # what the folder is, in words (env.sh's first line)
    env: dict[str, str] = field(default_factory=dict)        # exported by env.sh, in this order
    notes: dict[str, str] = field(default_factory=dict)      # the comment above a variable: why it is set
    argv: dict[str, tuple[Word, ...]] = field(default_factory=dict)  # role -> what start_<role>.sh runs
    why: dict[str, str] = field(default_factory=dict)        # role -> comment above its command line
    tail: str = ""        # bash after the exports: the SSH node's interface lookup (known only at start)

    def set(self, note: str = "", **values: object) -> None:
        if note:
            self.notes[next(iter(values))] = note
        self.env.update({k: str(v) for k, v in values.items()})

    def command(self, role: str) -> tuple[str, ...]:
        """What bash runs from the files p2pctl renders."""
        return tuple(self.env[w.key] + w.tail if isinstance(w, Ref) else w for w in self.argv[role])


def bin_dir_for(node: Node) -> str:
    return str(Path(node.venv) / "bin") if node.venv else str(Path(sys.executable).parent)


def vllm_python(fleet: Fleet, node: Node) -> str:
    """The node's vllm_venv, the fleet's vllm.venv, else the node's venv."""
    venv = node.vllm_venv or fleet.vllm.venv
    return str(Path(venv) / "bin" / "python") if venv else str(Path(bin_dir_for(node)) / "python")


def kv_transfer_config(node: Node, inst: Instance) -> str:
    """vLLM's LMCacheMPConnector config: it talks only to the lmcache server of its own instance, at the
    address that server binds (LMCache's default `tcp://localhost` misses a server bound to a node address)."""
    host = node.bind_host
    return json.dumps({
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"lmcache.mp.host": f"tcp://[{host}]" if ":" in host else f"tcp://{host}",
                                      "lmcache.mp.port": inst.ports.mp},
    }, separators=(",", ":"))


def vllm_args(fleet: Fleet) -> list[str]:
    """vLLM flags derived from the spec, then the user's `vllm.args`; host, port, model and the connector are
    on the start line itself. Prompt-token details are always on: without them vLLM never reports
    `usage.prompt_tokens_details.cached_tokens`, and no hit could be seen."""
    v = fleet.vllm
    args = ["--enable-prompt-tokens-details"]
    if v.max_model_len:
        args += ["--max-model-len", str(v.max_model_len)]
    if v.block_size:
        args += ["--block-size", str(v.block_size)]
    if v.enforce_eager:
        args.append("--enforce-eager")
    if v.device == "cuda" and v.gpu_memory_utilization:
        args += ["--gpu-memory-utilization", str(v.gpu_memory_utilization)]
    return args + list(v.args)


def kv_events_config(fleet: Fleet, node: Node, inst: Instance) -> str:
    """vLLM's --kv-events-config JSON for one instance ("" when the fleet's router reads no events).

    The topic stays vLLM's default "": vllm-router's static sources subscribe with an empty topic and drop
    batches under any other (llm-d's `kv@<address>:<port>@<model>` left its index empty). vLLM binds only endpoints with a
    wildcard or `::` in them and *connects* the rest, so vLLM gets the IPv4-mapped form `tcp://[::ffff:A]:P`:
    it binds A alone (never every interface) and the router still connects to `tcp://A:P`.
    """
    if not fleet.kv_events_on:
        return ""
    pub, replay = fleet.kv_event_ports_of(inst.id)
    host = node.bind_host
    if fleet.runtime == "vllm" and ":" not in host:
        host = f"::ffff:{host}"
    return json.dumps({
        "enable_kv_cache_events": True, "publisher": "zmq",
        "endpoint": f"tcp://{hostport(host, pub)}", "replay_endpoint": f"tcp://{hostport(host, replay)}",
        "topic": "",
    }, separators=(",", ":"))


def router_bin(fleet: Fleet) -> str:
    venv = fleet.router.venv or str(CHECKOUT / ".venv-router")
    return str(Path(venv) / "bin" / "vllm-router")


def router_args(fleet: Fleet) -> list[str]:
    r = fleet.router
    args: list[str] = r.failover_args()
    if r.cache_threshold is not None:
        args += ["--cache-threshold", str(r.cache_threshold)]
    # vllm-router refuses KV-event sources under any other policy; the engines publish regardless.
    if fleet.kv_events_on and r.policy == "kv_aware":
        for node, inst in fleet.instances():
            pub, _ = fleet.kv_event_ports_of(inst.id)
            worker = f"http://{hostport(node.address, inst.ports.engine)}"
            args += ["--kv-event-source", f"{worker}=tcp://{hostport(node.address, pub)}",
                     "--kv-event-replay-source", f"{worker}={fleet.kv_replay_url(node, inst.id)}"]
        args += ["--kv-event-block-size", str(fleet.kv_block_size), "--kv-event-model", fleet.model]
    return args + list(r.args)


SSH_UCX_LOOKUP = """\
# An SSH node: pin UCX to the interface that holds this node's address, found here at start time
# (unset, UCX's TCP listener would bind every interface with a random port).
P2P_UCX_DEV=$(ip -o -4 addr show 2>/dev/null | awk -v a="$P2P_NODE_ADDRESS" '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')
P2P_UCX_DEV=${P2P_UCX_DEV%%@*}
if [ -n "$P2P_UCX_DEV" ]; then
  export UCX_NET_DEVICES="$P2P_UCX_DEV"
else
  echo "env.sh: no interface holds $P2P_NODE_ADDRESS (or no 'ip' command): UCX_NET_DEVICES left unset, UCX may listen on every interface; set settings.ucx_net_devices" >&2
fi
unset P2P_UCX_DEV
"""


def _coordinator_run(fleet: Fleet, layout_for: Callable[[Node], RunLayout]) -> FolderRun:
    node, s, c = fleet.coordinator_node(), fleet.settings, fleet.coordinator
    keep_alive = max(c.timeout_keep_alive, int(max(fleet.effective_settings(i).heartbeat_interval
                                                   for _, i in fleet.instances())) + 5)
    run = FolderRun(node.name, COORDINATOR, f"the coordinator of fleet {fleet.name} (on node {node.name})")
    run.set(P2P_FLEET_NAME=fleet.name, P2P_NODE=node.name, P2P_RUN_DIR=layout_for(node).dir(COORDINATOR),
            P2P_BIN_DIR=bin_dir_for(node), PYTHONHASHSEED=s.python_hash_seed, LMCACHE_TRACK_USAGE="false",
            DO_NOT_TRACK=1, LMCACHE_DISABLE_BANNER=1, PYTHONWARNINGS="ignore", LMCACHE_LOG_LEVEL=s.log_level)
    run.set("Bind address: 127.0.0.1 unless the fleet spec says otherwise (lmcache's own default is 0.0.0.0).",
            LMCACHE_MP_COORDINATOR_HOST=c.host, LMCACHE_MP_COORDINATOR_PORT=c.port,
            LMCACHE_MP_COORDINATOR_CHUNK_SIZE=s.chunk_size, LMCACHE_MP_COORDINATOR_HASH_ALGORITHM=s.hash_algorithm)
    run.set("Must exceed the servers' heartbeat interval, or heartbeats fail with \"Server disconnected\".",
            LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE=keep_alive)
    run.set(P2P_COORDINATOR_URL=fleet.coordinator_url)
    run.argv["coordinator"] = (
        Ref("P2P_BIN_DIR", "/lmcache"), "coordinator", "--host", Ref("LMCACHE_MP_COORDINATOR_HOST"),
        "--port", Ref("LMCACHE_MP_COORDINATOR_PORT"), "--chunk-size", Ref("LMCACHE_MP_COORDINATOR_CHUNK_SIZE"),
        "--hash-algorithm", Ref("LMCACHE_MP_COORDINATOR_HASH_ALGORITHM"),
        "--timeout-keep-alive", Ref("LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE"))
    return run


def _instance_env(run: FolderRun, fleet: Fleet, node: Node, inst: Instance, s: Settings,
                  plan: Optional[InstancePlan], run_dir: Path) -> None:
    address, bind = node.address, node.bind_host
    run.set("--- identity and paths", P2P_FLEET_NAME=fleet.name, P2P_NODE=node.name, P2P_NODE_ADDRESS=address,
            P2P_INSTANCE_ID=inst.id, P2P_RUNTIME=fleet.runtime, P2P_MODEL=fleet.model, P2P_RUN_DIR=run_dir,
            P2P_BIN_DIR=bin_dir_for(node))
    if fleet.api_key:
        run.set("The engines' API key (this file is 0600): the embedded engine and vLLM both read it from here.",
                P2P_ENGINE_API_KEY=fleet.api_key, VLLM_API_KEY=fleet.api_key)
    run.set("--- must be identical on every peer (p2pctl refuses a fleet where they differ)",
            PYTHONHASHSEED=s.python_hash_seed, LMCACHE_CHUNK_SIZE=s.chunk_size,
            LMCACHE_HASH_ALGORITHM=s.hash_algorithm, LMCACHE_L1_ALIGN_BYTES=s.l1_align_bytes,
            LMCACHE_P2P_TRANSFER_ENGINE=s.transfer_engine)
    run.set("--- hygiene: no usage telemetry to an outside host, quiet start-up", LMCACHE_TRACK_USAGE="false",
            DO_NOT_TRACK=1, LMCACHE_DISABLE_BANNER=1, PYTHONWARNINGS="ignore", LMCACHE_LOG_LEVEL=s.log_level)
    run.set("--- coordinator membership", LMCACHE_COORDINATOR_URL=fleet.coordinator_url,
            LMCACHE_COORDINATOR_ADVERTISE_IP=address, LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL=s.heartbeat_interval)
    run.set("Cache events (stores, evictions, chunk tokens) to the coordinator's key directory "
            "(settings.cache_events).", LMCACHE_COORDINATOR_EVENT_REPORTING="true" if s.cache_events else "false")
    run.set("--- lmcache server", LMCACHE_INSTANCE_ID=inst.id, LMCACHE_HOST=bind, LMCACHE_PORT=inst.ports.mp,
            LMCACHE_HTTP_HOST=bind, LMCACHE_HTTP_PORT=inst.ports.http, LMCACHE_L1_SIZE_GB=s.l1_size_gb)
    run.set("lmcache 0.5.6 takes whole GiB for the initial size (and caps it at the L1 size): rounded up.",
            LMCACHE_L1_INIT_SIZE_GB=math.ceil(s.l1_size_gb), LMCACHE_EVICTION_POLICY=s.eviction_policy,
            LMCACHE_SUPPORTED_TRANSFER_MODE=s.supported_transfer_mode, LMCACHE_MAX_WORKERS=s.max_workers)
    run.set("The L1 pool as POSIX shared memory the engine maps (settings.shm_transport); empty: pickled tensors.",
            LMCACHE_SHM_NAME=fleet.shm_name(inst), LMCACHE_P2P_ADVERTISE_URL=hostport(address, inst.ports.p2p),
            LMCACHE_P2P_LISTEN_URL=hostport(bind, inst.ports.p2p), LMCACHE_P2P_LOOKUP_TIMEOUT=s.p2p_lookup_timeout,
            LMCACHE_P2P_LOAD_TIMEOUT=s.p2p_load_timeout)
    run.set("0: this server keeps its own cache but never joins the P2P mesh (settings.p2p: false).",
            LMCACHE_P2P_ENABLED=1 if s.p2p else 0, P2P_SERVER_NICE=s.server_nice,
            P2P_SERVER_HTTP_URL=f"http://{hostport(address, inst.ports.http)}")
    ucx = "--- UCX (the NIXL transfer channel); empty = UCX chooses"
    if s.ucx_tls:
        run.set(ucx, UCX_TLS=s.ucx_tls)
        ucx = ""
    if plan:
        run.set(f"{ucx}\nThe NIC plan (`p2pctl probe` shows it): {plan.why}; set settings.ucx_net_devices to pin "
                "others".strip(), UCX_NET_DEVICES=s.ucx_net_devices, UCX_MAX_RMA_RAILS=plan.max_rma_rails)
    elif s.ucx_net_devices:
        run.set(ucx, UCX_NET_DEVICES=s.ucx_net_devices)
    elif fleet.all_loopback:
        run.set(f"{ucx}\nEvery peer is on this host: UCX's TCP listener binds only to lo (unset, it would listen "
                "on every\ninterface, eth0 included, with a random port).".strip(), UCX_NET_DEVICES="lo")
    elif node.connection == "ssh":
        run.tail = SSH_UCX_LOOKUP
    run.set(f"--- engine ({fleet.runtime})", P2P_ENGINE_HOST=bind, P2P_ENGINE_PORT=inst.ports.engine,
            P2P_ENGINE_URL=f"http://{hostport(address, inst.ports.engine)}",
            P2P_ENGINE_LMCACHE_URL=f"tcp://{hostport(address, inst.ports.mp)}")
    run.set("vLLM-format KV events for the router (router.kv_events); empty = off.",
            P2P_KV_EVENTS_CONFIG=kv_events_config(fleet, node, inst))
    if fleet.runtime == "embedded":
        run.set("The engine: section, one variable per key (P2P_ENGINE_<KEY>), each passed as --<key> too.",
                **fleet.engine.env())
    else:
        v, model_path = fleet.vllm, fleet.vllm.model_path or fleet.model
        run.set(P2P_VLLM_PYTHON=vllm_python(fleet, node), P2P_VLLM_MODEL_PATH=model_path, P2P_VLLM_DEVICE=v.device,
                P2P_VLLM_KV_TRANSFER_CONFIG=kv_transfer_config(node, inst), VLLM_NO_USAGE_STATS=1)
        if model_path.startswith("/"):
            run.set("The model is a local folder: never reach for the hub.", HF_HUB_OFFLINE=1,
                    TRANSFORMERS_OFFLINE=1)
        if v.device == "cpu":
            run.set(VLLM_CPU_KVCACHE_SPACE=v.cpu_kvcache_space_gb, VLLM_CPU_OMP_THREADS_BIND=inst.cpus or "auto")
    if inst.gpu is not None:
        run.set(CUDA_VISIBLE_DEVICES=inst.gpu)


def _mooncake_env(run: FolderRun, node: Node, inst: Instance, s: Settings, plan: Optional[InstancePlan]) -> None:
    run.set("--- Mooncake's transfer engine (settings.mooncake_*): LMCache passes these two to it. It listens on\n"
            f"0.0.0.0 and [::] (ports {MOONCAKE_PORTS.start}-{MOONCAKE_PORTS.stop - 1}) whatever the bind: "
            "settings.mooncake_listen_any.",
            MC_TE_PROTOCOL=s.mooncake_protocol)
    if s.mooncake_protocol == "rdma":
        hcas = dict.fromkeys(d.split(":")[0] for d in (plan.devices if plan else []))
        device = s.mooncake_device or ",".join(hcas)
        if not device:
            raise BadInput(f"settings.mooncake_protocol: rdma, but instance {inst.id} on node {node.name} has no "
                           "RDMA device: the NIC plan found no active port (`p2pctl probe`); set "
                           "settings.mooncake_device or use mooncake_protocol: tcp")
        run.set("The HCAs Mooncake may use (settings.mooncake_device, else the NIC plan's).", MC_TE_DEVICE=device)


def _instance_run(fleet: Fleet, node: Node, inst: Instance, plan: Optional[InstancePlan],
                  layout_for: Callable[[Node], RunLayout]) -> FolderRun:
    s = fleet.effective_settings(inst)
    ucx_plan = plan if plan and plan.devices and not s.ucx_net_devices else None  # the spec's pin wins
    s = s.model_copy(update={"ucx_net_devices": plan.net_devices}) if ucx_plan else s
    run = FolderRun(node.name, inst.id, f"instance {inst.id} on node {node.name} of fleet {fleet.name}")
    _instance_env(run, fleet, node, inst, s, ucx_plan, layout_for(node).dir(inst.id))
    if s.transfer_engine == "mooncake_te":
        _mooncake_env(run, node, inst, s, plan)
    e = run.env
    p2p = ["--p2p-advertise-url", Ref("LMCACHE_P2P_ADVERTISE_URL"),
           "--p2p-listen-url", Ref("LMCACHE_P2P_LISTEN_URL")] if s.p2p else []
    shm = ["--shm-name", Ref("LMCACHE_SHM_NAME")] if e["LMCACHE_SHM_NAME"] else []
    run.argv["server"] = (
        "nice", "-n", Ref("P2P_SERVER_NICE"), Ref("P2P_BIN_DIR", "/lmcache"), "server",
        "--instance-id", Ref("LMCACHE_INSTANCE_ID"), "--host", Ref("LMCACHE_HOST"), "--port", Ref("LMCACHE_PORT"),
        "--http-host", Ref("LMCACHE_HTTP_HOST"), "--http-port", Ref("LMCACHE_HTTP_PORT"),
        "--chunk-size", Ref("LMCACHE_CHUNK_SIZE"), "--hash-algorithm", Ref("LMCACHE_HASH_ALGORITHM"),
        "--max-workers", Ref("LMCACHE_MAX_WORKERS"),
        "--supported-transfer-mode", Ref("LMCACHE_SUPPORTED_TRANSFER_MODE"),
        *shm, "--l1-size-gb", Ref("LMCACHE_L1_SIZE_GB"), "--l1-init-size-gb", Ref("LMCACHE_L1_INIT_SIZE_GB"),
        "--l1-align-bytes", Ref("LMCACHE_L1_ALIGN_BYTES"), "--eviction-policy", Ref("LMCACHE_EVICTION_POLICY"),
        "--coordinator-url", Ref("LMCACHE_COORDINATOR_URL"),
        "--coordinator-advertise-ip", Ref("LMCACHE_COORDINATOR_ADVERTISE_IP"),
        "--coordinator-heartbeat-interval", Ref("LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL"), *p2p,
        "--p2p-transfer-engine", Ref("LMCACHE_P2P_TRANSFER_ENGINE"),
        "--p2p-lookup-timeout", Ref("LMCACHE_P2P_LOOKUP_TIMEOUT"),
        "--p2p-load-timeout", Ref("LMCACHE_P2P_LOAD_TIMEOUT"),
        *s.server_extra_args)
    if fleet.runtime == "embedded":
        run.argv["engine"] = (
            Ref("P2P_BIN_DIR", "/p2p-engine"), "--host", Ref("P2P_ENGINE_HOST"), "--port", Ref("P2P_ENGINE_PORT"),
            "--served-model-name", Ref("P2P_MODEL"), "--instance-id", Ref("P2P_INSTANCE_ID"),
            "--lmcache-url", Ref("P2P_ENGINE_LMCACHE_URL"), "--chunk-size", Ref("LMCACHE_CHUNK_SIZE"),
            *(w for flag, var in fleet.engine.flags() for w in (flag, Ref(var))),
            "--kv-events-config", Ref("P2P_KV_EVENTS_CONFIG"))
    else:
        run.why["engine"] = ("vLLM talks only to its local lmcache server (kv_connector_extra_config carries its "
                             "address).\n`python -m` rather than the `vllm` script: that script cannot find itself "
                             "when the distribution is vllm-cpu.")
        run.argv["engine"] = (
            Ref("P2P_VLLM_PYTHON"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", Ref("P2P_VLLM_MODEL_PATH"), "--served-model-name", Ref("P2P_MODEL"),
            "--host", Ref("P2P_ENGINE_HOST"), "--port", Ref("P2P_ENGINE_PORT"),
            "--kv-transfer-config", Ref("P2P_VLLM_KV_TRANSFER_CONFIG"), *vllm_args(fleet),
            *(["--kv-events-config", Ref("P2P_KV_EVENTS_CONFIG")] if e["P2P_KV_EVENTS_CONFIG"] else []))
    return run


def _router_run(fleet: Fleet) -> FolderRun:
    node, r = fleet.router_node(), fleet.router
    run = FolderRun(node.name, ROUTER, f"the router of fleet {fleet.name} (vllm-router, policy {r.policy}) on "
                                       f"node {node.name}")
    run.set(P2P_FLEET=fleet.name, P2P_ROUTER_BIN=router_bin(fleet), P2P_ROUTER_HOST=node.bind_host,
            P2P_ROUTER_PORT=r.port, P2P_ROUTER_URL=f"http://{hostport(node.address, r.port)}",
            P2P_ROUTER_PROMETHEUS_PORT=r.prometheus_port, P2P_ROUTER_POLICY=r.policy)
    workers = [f"http://{hostport(n.address, i.ports.engine)}" for n, i in fleet.instances()]
    run.why["router"] = ("Not exec'd: vllm-router renames its process to \"vllm::router\" (setproctitle), so this "
                         "bash, whose command line\nnames the wrapper, stays the process `p2pctl down` and `status` "
                         "recognise; stopping signals the whole group.")
    run.argv["router"] = (
        Ref("P2P_ROUTER_BIN"), "--host", Ref("P2P_ROUTER_HOST"), "--port", Ref("P2P_ROUTER_PORT"), "--worker-urls",
        *workers, "--policy", Ref("P2P_ROUTER_POLICY"), "--prometheus-host", Ref("P2P_ROUTER_HOST"),
        "--prometheus-port", Ref("P2P_ROUTER_PROMETHEUS_PORT"), "--worker-startup-check-interval", "1",
        *router_args(fleet))
    return run


def fleet_runs(fleet: Fleet, layout_for: Callable[[Node], RunLayout],
               nic_plans: Optional[Mapping[str, InstancePlan]] = None) -> dict[str, FolderRun]:
    """By folder, in start order; nic_plans (by instance id) fill UCX_NET_DEVICES and UCX_MAX_RMA_RAILS where the
    spec leaves the devices unset."""
    runs = [_coordinator_run(fleet, layout_for)]
    runs += [_instance_run(fleet, node, inst, (nic_plans or {}).get(inst.id), layout_for)
             for node, inst in fleet.instances()]
    runs += [_router_run(fleet)] if fleet.router.enabled else []
    return {r.folder: r for r in runs}


def env_sh_text(run: FolderRun) -> str:
    lines = ["# shellcheck shell=bash", f"# env.sh for {run.title}.",
             "# Rendered by `p2pctl render` from fleet.yaml; re-render instead of editing (an edit shows up as a",
             "# diff in `p2pctl up --dry-run --no-render` and as env_drift in `p2pctl doctor`)."]
    for key, value in run.env.items():
        note = run.notes.get(key, "")
        if note.startswith("--- "):
            lines.append("")
        lines += [f"# {line}" for line in note.split("\n") if note]
        lines.append(f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n" + run.tail


def _word(word: Word) -> str:
    if isinstance(word, Ref):
        return f'"${word.key}"' + (shlex.quote(word.tail) if word.tail else "")
    return shlex.quote(word)


def command_text(argv: tuple[Word, ...]) -> str:
    """One flag per continued line."""
    out = _word(argv[0])
    for word in argv[1:]:
        out += (" \\\n  " if isinstance(word, str) and word.startswith("--") else " ") + _word(word)
    return out


def wrapper_text(run: FolderRun, role: str) -> str:
    why = [f"# {line}" for line in run.why[role].split("\n")] if role in run.why else []
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# start_{role}.sh for {run.title}: runs it in the foreground; `p2pctl up` starts it detached.",
        "set -euo pipefail", 'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "# shellcheck source=/dev/null", 'source "$here/env.sh"', *why,
        ("" if role == "router" else "exec ") + command_text(run.argv[role])]) + "\n"


def render_fleet(fleet: Fleet, layout_for: Callable[[Node], RunLayout],
                 nic_plans: Optional[Mapping[str, InstancePlan]] = None) -> list[RenderedFile]:
    """Pure, so golden tests can pin it."""
    out = []
    for run in fleet_runs(fleet, layout_for, nic_plans).values():
        out.append(RenderedFile(run.node, run.folder, "env.sh", env_sh_text(run), False))
        out += [RenderedFile(run.node, run.folder, f"start_{role}.sh", wrapper_text(run, role), True)
                for role in run.argv]
    return out


def file_mode(executable: bool) -> int:
    return 0o700 if executable else 0o600


def write_rendered(rendered: list[RenderedFile], layout: RunLayout) -> list[Path]:
    """Under this machine's run folder; the default `p2p-run/` beside the fleet file is made private too."""
    if layout.root.parent.name == "p2p-run" and not layout.root.parent.is_symlink():
        files.private_dir(layout.root.parent)
    files.private_dir(layout.root)
    written = []
    for f in rendered:
        folder = layout.dir(f.unit)
        files.private_dir(folder)
        # env.sh may hold an API key and logs hold prompts: only the owner reads the run folder.
        written.append(files.write_text(folder / f.name, f.text, file_mode(f.executable)))
    return written


def check_on_disk(rendered: list[RenderedFile], layout: RunLayout) -> None:
    """Before files on disk are used as they are (`up --no-render`, its dry run): the run folder, each unit's
    folder and each file must be ours and writable by nobody else, else someone else chose what runs."""
    folders = sorted({layout.dir(f.unit) for f in rendered})
    for path in [layout.root, *folders, *(layout.dir(f.unit) / f.name for f in rendered)]:
        if path.exists() or path.is_symlink():  # nothing there yet: the caller says to render first
            files.check_trusted(path)
