"""Render env.sh and the start wrappers for every instance and the coordinator (jinja2, StrictUndefined)."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

import jinja2

from p2p_ops import files
from p2p_ops.lifecycle.nic_plan import InstancePlan
from p2p_ops.resources import CHECKOUT, template_text
from p2p_ops.spec.layout import COORDINATOR, ROUTER, RunLayout
from p2p_ops.spec.model import Fleet, Instance, Node, hostport
from p2p_ops.spec.units import INSTANCE_ROLES
from p2p_ops.spec.settings import Settings


def template_env() -> jinja2.Environment:
    env = jinja2.Environment(
        # Package data, not a folder next to this file: an installed wheel has no checkout around it.
        loader=jinja2.FunctionLoader(template_text),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # Every value that reaches a shell is quoted, whatever it contains.
    env.filters["q"] = lambda v: shlex.quote(str(v))
    # `address | hp(port)`: host:port with an IPv6 address in brackets, as every URL needs.
    env.filters["hp"] = lambda address, port: hostport(str(address), port)
    return env


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@dataclass(frozen=True)
class RenderedFile:
    node: str       # node that uses the file
    unit: str       # instance id or "coordinator": the folder it lives in
    name: str       # file name inside that folder
    text: str
    executable: bool


def bin_dir_for(node: Node) -> str:
    """The bin folder holding lmcache, p2p-engine (and vllm) on that node."""
    if node.venv:
        return str(Path(node.venv) / "bin")
    return str(Path(sys.executable).parent)


def vllm_python(fleet: Fleet, node: Node) -> str:
    """The interpreter that runs vLLM on that node: its vllm_venv, the fleet's vllm.venv, else the node's."""
    venv = node.vllm_venv or fleet.vllm.venv
    return str(Path(venv) / "bin" / "python") if venv else str(Path(bin_dir_for(node)) / "python")


def kv_transfer_config(node: Node, inst: Instance) -> str:
    """vLLM's LMCacheMPConnector config: it talks only to the lmcache server of its own instance, at the
    address that server binds (LMCache's default `tcp://localhost` misses a server bound to a node address)."""
    return json.dumps({
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"lmcache.mp.host": f"tcp://{_bracketed(node.bind_host)}",
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
    index = [i.id for _, i in fleet.instances()].index(inst.id)
    pub, replay = fleet.router.kv_event_ports(index)
    host = node.bind_host
    if fleet.runtime == "vllm" and ":" not in host:
        host = f"::ffff:{host}"
    return json.dumps({
        "enable_kv_cache_events": True, "publisher": "zmq",
        "endpoint": f"tcp://{hostport(host, pub)}", "replay_endpoint": f"tcp://{hostport(host, replay)}",
        "topic": "",
    }, separators=(",", ":"))


def kv_event_block_size(fleet: Fleet) -> int:
    return fleet.vllm.effective_block_size() if fleet.runtime == "vllm" else fleet.engine.block_size


def router_bin(fleet: Fleet) -> str:
    venv = fleet.router.venv or str(CHECKOUT / ".venv-router")
    return str(Path(venv) / "bin" / "vllm-router")


def router_args(fleet: Fleet) -> list[str]:
    """vllm-router flags beyond host, ports, workers and policy: failover, KV-event sources, the user's args."""
    r = fleet.router
    args: list[str] = r.failover_args()
    if r.cache_threshold is not None:
        args += ["--cache-threshold", str(r.cache_threshold)]
    # vllm-router refuses KV-event sources under any other policy; the engines publish regardless.
    if fleet.kv_events_on and r.policy == "kv_aware":
        for i, (node, inst) in enumerate(fleet.instances()):
            pub, replay = r.kv_event_ports(i)
            worker = f"http://{hostport(node.address, inst.ports.engine)}"
            args += ["--kv-event-source", f"{worker}=tcp://{hostport(node.address, pub)}",
                     "--kv-event-replay-source", f"{worker}=tcp://{hostport(node.address, replay)}"]
        args += ["--kv-event-block-size", str(kv_event_block_size(fleet)), "--kv-event-model", fleet.model]
    return args + list(r.args)


def render_router(fleet: Fleet, layout_for: Callable[[Node], RunLayout]) -> list[RenderedFile]:
    if not fleet.router.enabled:
        return []
    env, node = template_env(), fleet.router_node()
    workers = [f"http://{hostport(n.address, i.ports.engine)}" for n, i in fleet.instances()]
    ctx = dict(fleet=fleet, node=node, r=fleet.router, router_bin=router_bin(fleet), workers=workers,
               router_args=router_args(fleet))
    return [RenderedFile(node.name, ROUTER, "env.sh", env.get_template("router_env.sh.j2").render(ctx), False),
            RenderedFile(node.name, ROUTER, "start_router.sh",
                         env.get_template("start_router.sh.j2").render(ctx), True)]


def _planned(fleet: Fleet, inst: Instance, plan: Optional[InstancePlan]) -> tuple[Settings, Optional[InstancePlan]]:
    """The instance's settings with its NIC plan's devices where the spec leaves UCX_NET_DEVICES unset."""
    s = fleet.effective_settings(inst)
    if plan is None or not plan.devices or s.ucx_net_devices:
        return s, None
    return s.model_copy(update={"ucx_net_devices": plan.net_devices}), plan


def render_fleet(fleet: Fleet, layout_for: Callable[[Node], RunLayout],
                 nic_plans: Optional[Mapping[str, InstancePlan]] = None) -> list[RenderedFile]:
    """What `p2pctl render` writes; pure, so golden tests can pin it. layout_for gives each node's run folder;
    nic_plans (by instance id, `lifecycle.nic_plan`) fill UCX_NET_DEVICES and UCX_MAX_RMA_RAILS where the
    spec leaves the devices unset."""
    env = template_env()
    files: list[RenderedFile] = []
    coord_node = fleet.coordinator_node()
    keep_alive = max(fleet.coordinator.timeout_keep_alive,
                     int(max(s.heartbeat_interval for s in
                             [fleet.effective_settings(i) for _, i in fleet.instances()])) + 5)
    ctx = dict(fleet=fleet, node=coord_node, s=fleet.settings,
               instance_dir=str(layout_for(coord_node).dir(COORDINATOR)),
               bin_dir=bin_dir_for(coord_node), keep_alive=keep_alive)
    files.append(RenderedFile(coord_node.name, COORDINATOR, "env.sh",
                              env.get_template("coordinator_env.sh.j2").render(ctx), False))
    files.append(RenderedFile(coord_node.name, COORDINATOR, "start_coordinator.sh",
                              env.get_template("start_coordinator.sh.j2").render(ctx), True))
    for node, inst in fleet.instances():
        s, plan = _planned(fleet, inst, (nic_plans or {}).get(inst.id))
        ctx = dict(fleet=fleet, node=node, inst=inst, s=s, nic_plan=plan, e=fleet.engine,
                   v=fleet.vllm, instance_dir=str(layout_for(node).dir(inst.id)), bin_dir=bin_dir_for(node),
                   kv_transfer_config=kv_transfer_config(node, inst), vllm_python=vllm_python(fleet, node),
                   vllm_args=vllm_args(fleet), model_path=fleet.vllm.model_path or fleet.model,
                   kv_events_config=kv_events_config(fleet, node, inst), shm_name=fleet.shm_name(inst))
        files.append(RenderedFile(node.name, inst.id, "env.sh", env.get_template("env.sh.j2").render(ctx), False))
        for role in INSTANCE_ROLES:
            files.append(RenderedFile(node.name, inst.id, f"start_{role}.sh",
                                      env.get_template(f"start_{role}.sh.j2").render(ctx), True))
    return files + render_router(fleet, layout_for)


def file_mode(executable: bool) -> int:
    return 0o700 if executable else 0o600


def write_rendered(rendered: list[RenderedFile], layout: RunLayout) -> list[Path]:
    """Write the files under this machine's run folder (each through a temp file and a rename, never through
    a link); returns their paths. The default `p2p-run/` beside the fleet file is made private too."""
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
    if not (layout.root.exists() or layout.root.is_symlink()):
        return  # nothing on disk yet: the caller says to render first
    files.check_trusted(layout.root)
    for folder in sorted({layout.dir(f.unit) for f in rendered}):
        if folder.exists() or folder.is_symlink():
            files.check_trusted(folder)
    for f in rendered:
        path = layout.dir(f.unit) / f.name
        if path.exists() or path.is_symlink():
            files.check_trusted(path)
