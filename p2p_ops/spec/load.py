"""Loading and validating `fleet.yaml`: every invalid file is refused with one line naming the field path and the fix.

For example `nodes[1].instances[0].ports.http: 8081 is already used by node-a-0 on 127.0.0.1`. The models are in
`spec.model` (topology) and `spec.settings` (settings sections); the checks that span fields, the error
formatting and loading are here.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.spec import strict_yaml
from p2p_ops.spec.agreement import FLEET_WIDE_ONLY
from p2p_ops.spec.flags import p2p_refused_l1
from p2p_ops.spec.model import Fleet, host_key, is_loopback
from p2p_ops.spec.ports import INSTANCE_KINDS
from p2p_ops.spec.settings import CPU_BLOCK_SIZE, MOONCAKE_PORTS, SECRET_FIELDS
from p2p_ops.spec.units import ROLES, port_plan

# A fleet file is a few KiB; anything past this is not one.
MAX_SPEC_BYTES = 4 << 20
# Addresses set aside for tests besides loopback: 198.18.0.0/15 (benchmarking, the testbed's namespaces).
BENCHMARK_NETWORK = ipaddress.ip_network("198.18.0.0/15")


def _path_str(loc: tuple[Any, ...]) -> str:
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).removeprefix(".")
    return path or "(top level)"


def _pydantic_message(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    loc = err.get("loc", ())
    if kind == "extra_forbidden":
        key = loc[-1] if loc else "?"
        # A setting peers must agree on (`spec.agreement`), put under an instance's settings.
        if key in FLEET_WIDE_ONLY and len(loc) >= 2 and loc[-2] == "settings" and "instances" in loc:
            setting = "model" if key == "model" else f"settings.{key}"
            return (f"{_path_str(loc)}: must be identical across peers and cannot be overridden per "
                    f"instance; set it once as {setting}")
        return f"{_path_str(loc)}: unknown key {key!r} in {_path_str(loc[:-1])}; remove it or check the spelling"
    if kind == "missing":
        return f"{_path_str(loc)}: required field is missing; add it"
    msg = err.get("msg", "invalid value")
    value = err.get("input")
    secret = bool(loc) and str(loc[-1]) in SECRET_FIELDS
    shown = "" if secret or isinstance(value, (dict, list)) else f" (got {_short(repr(value))})"
    return f"{_path_str(loc)}: {msg}{shown}"


def _short(text: str, most: int = 80) -> str:
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def _cross_checks(fleet: Fleet) -> None:
    seen_nodes: dict[str, int] = {}
    for ni, node in enumerate(fleet.nodes):
        if node.name in seen_nodes:
            raise BadInput(f"nodes[{ni}].name: {node.name!r} is already used by nodes[{seen_nodes[node.name]}]; "
                           "node names must be unique")
        seen_nodes[node.name] = ni
        if node.connection == "local" and not is_loopback(node.address):
            raise BadInput(f"nodes[{ni}].address: {node.address!r} is not a loopback address; a 'local' node "
                           "runs on this machine, use 127.0.0.1 (or connection: ssh for a remote host)")

    alg = fleet.settings.hash_algorithm
    if alg != "blake3" and fleet.runtime != "vllm":
        # LMCache 0.5.6 loads every algorithm but blake3 from vLLM; without it, it falls back to Python's hash(),
        # whose NONE_HASH differs per process (hash(None) is an address before Python 3.12): nothing is shared.
        raise BadInput(f"settings.hash_algorithm: {alg!r} needs runtime: vllm (without vLLM, LMCache falls back to "
                       "a per-process builtin hash and peers share nothing); use blake3")
    fleet.coordinator_node()  # raises on an unknown coordinator.node
    if fleet.router.enabled and fleet.router.policy == "kv_aware" and not fleet.router.kv_events:
        raise BadInput("router.kv_events: false with policy kv_aware: kv_aware routes on KV events from every "
                       "engine; set router.kv_events: true (or pick another router.policy)")
    chunk, block = fleet.settings.chunk_size, fleet.kv_block_size
    if chunk % block:
        whose = (f"vLLM's block size {block} (vllm.block_size, device {fleet.vllm.device}); LMCache"
                 if fleet.runtime == "vllm" else f"engine.block_size {block}; the engine")
        raise BadInput(f"settings.chunk_size: {chunk} is not a multiple of {whose} stores whole blocks per chunk, "
                       f"so use a multiple such as {block * max(1, round(chunk / block))}")
    _vllm_checks(fleet)
    _mooncake_checks(fleet)
    _p2p_l1_checks(fleet)
    seen_ids: dict[str, str] = {}
    for where, _, inst in fleet.placed_instances():
        if inst.id in seen_ids:
            raise BadInput(f"{where}.id: {inst.id!r} is already used by {seen_ids[inst.id]}; "
                           "instance ids must be unique across the fleet")
        seen_ids[inst.id] = where
    if fleet.router.enabled and fleet.router.venv and not fleet.router.venv.startswith("/"):
        raise BadInput(f"router.venv: {fleet.router.venv!r} is relative; use an absolute path (the router starts "
                       "in its own run folder)")
    _port_clashes(fleet)


def _p2p_l1_checks(fleet: Fleet) -> None:
    if not fleet.settings.p2p:
        return
    refused = [p2p_refused_l1(fleet.settings.server_extra_args, "fleet", "settings.server_extra_args")]
    refused += [p2p_refused_l1(inst.settings.server_extra_args or [], inst.id,  # type: ignore[attr-defined]
                               f"{where}.settings.server_extra_args") for where, _, inst in fleet.placed_instances()]
    if v := next((v for v in refused if v), None):
        raise BadInput(f"{v.evidence[0].source}: {v.line()}", cause=v)


def _port_clashes(fleet: Fleet) -> None:
    """No two ports of the port plan (every process of the fleet, its Prometheus included) on one host; the
    first claimant keeps it. Prometheus runs on this machine, bound to its own host."""
    addresses = {n.name: n.address for n in fleet.nodes}
    owners: dict[tuple[str, int], str] = {}
    for p in port_plan(fleet, ROLES):
        address = fleet.coordinator.host if p.kind == "coordinator" else addresses.get(p.node, p.bind)
        key = (host_key(address), p.port)
        if key in owners:
            what = "" if p.kind in INSTANCE_KINDS else f" ({p.role})"
            raise BadInput(f"{p.field}: {p.port}{what} is already used by {owners[key]} on {address}; "
                           "pick a free port")
        owners[key] = (f"the {p.kind}" if p.kind in ("coordinator", "prometheus")
                       else p.role if p.kind.startswith(("router", "kv_events")) else p.instance)


def _vllm_checks(fleet: Fleet) -> None:
    if fleet.runtime != "vllm":
        return
    v = fleet.vllm
    if v.device == "cpu" and v.block_size not in (None, CPU_BLOCK_SIZE):
        raise BadInput(f"vllm.block_size: {v.block_size} is not supported by vLLM's CPU backend; use "
                       f"{CPU_BLOCK_SIZE} or leave it empty")
    for where, _, inst in fleet.placed_instances():
        if v.device == "cpu" and inst.gpu is not None:
            raise BadInput(f"{where}.gpu: set on a vllm.device: cpu fleet; remove it (or use vllm.device: cuda)")
        if inst.cpus and not CPUS_PATTERN.fullmatch(inst.cpus):
            raise BadInput(f"{where}.cpus: {inst.cpus!r} is not a core list like '0-3' or '0,2,4'")
    # Engines start in their own run folders, so a relative path would point somewhere else there.
    paths = [("vllm.venv", v.venv), ("vllm.model_path", v.model_path)]
    paths += [(f"nodes[{ni}].vllm_venv", n.vllm_venv) for ni, n in enumerate(fleet.nodes)]
    for where, value in paths:
        if _relative(where, value):
            absolute = str(Path(value).expanduser().resolve())
            raise BadInput(f"{where}: {value!r} is relative; use an absolute path (engines start in their own "
                           f"run folders), e.g. {absolute!r}")


def _relative(where: str, value: str) -> bool:
    if not value or value.startswith("/"):
        return False
    if where.endswith("venv"):
        return True
    # vllm.model_path may be a hub id (`name` or `owner/name`) as well as a folder: anything else that is not
    # absolute is a relative path, and so is an id-shaped one that names something in the current folder
    # (`models/tiny-llama`), which vLLM, started elsewhere, would look up on the hub.
    return (value.startswith(("./", "../", "~")) or value in (".", "..") or value.count("/") > 1
            or Path(value).exists())


def _mooncake_checks(fleet: Fleet) -> None:
    s = fleet.settings
    if s.transfer_engine != "mooncake_te":
        return
    if not s.mooncake_listen_any:
        ports = f"{MOONCAKE_PORTS.start}-{MOONCAKE_PORTS.stop - 1}"
        raise BadInput(
            "settings.transfer_engine: mooncake_te opens two listeners per lmcache server on every interface, "
            "whatever nodes[].bind says: Mooncake's handshake RPC on 0.0.0.0 and its TCP transport on [::], each on "
            f"a random port in {ports} (hard-coded wildcard binds in Mooncake 0.3.13, no setting moves them); "
            "set settings.mooncake_listen_any: true to accept that (firewall those ports), or use "
            "transfer_engine: nixl, which stays on the bind address")
    # Loopback fleets have no NIC plan to take the HCAs from.
    if s.mooncake_protocol == "rdma" and fleet.all_loopback and not all(
            fleet.effective_settings(inst).mooncake_device for _, inst in fleet.instances()):
        raise BadInput("settings.mooncake_protocol: rdma needs the RDMA devices (HCAs) to use and this loopback "
                       "fleet has no NIC plan to take them from; set settings.mooncake_device (e.g. mlx5_0) or "
                       "use mooncake_protocol: tcp")


CPUS_PATTERN = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def parse_fleet(data: Any, source: str = "fleet.yaml") -> Fleet:
    if not isinstance(data, dict):
        raise BadInput(f"{source}: expected a mapping at the top level (name:, nodes:, ...); see `p2pctl init`")
    try:
        fleet = Fleet.model_validate(data)
    except ValidationError as exc:
        raise BadInput(_pydantic_message(exc.errors()[0])) from None
    _cross_checks(fleet)
    return fleet


def load_fleet(path: str | Path) -> Fleet:
    """From a regular file (the one named, links followed: the user chose it) of UTF-8."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise BadInput(f"{path}: no fleet file; write one with `p2pctl init --local 2` or pass -f FILE")
    try:
        text = files.read_bytes(path, MAX_SPEC_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    return parse_fleet(strict_yaml.load(text, str(path)), str(path))


def _test_address(address: str) -> bool:
    try:
        return is_loopback(address) or ipaddress.ip_address(address) in BENCHMARK_NETWORK
    except ValueError:
        return False


def warnings(fleet: Fleet, path: Optional[Path] = None) -> list[str]:
    """What `validate` accepts but points out: unverified host keys on addresses that are not test hosts, and a
    fleet file holding the API key that others can read."""
    out = [f"nodes[{ni}].ssh_insecure_host_keys: true on {node.address}, which is not a test address "
           "(loopback or 198.18.0.0/15): SSH will not notice a host that impersonates it; set it false and add "
           "the host key to known_hosts" for ni, node in enumerate(fleet.nodes)
           if node.connection == "ssh" and node.ssh_insecure_host_keys and not _test_address(node.address)]
    if fleet.api_key and path is not None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = 0
        if mode & 0o077:
            out.append(f"{path}: holds api_key and is readable by others (mode {mode:04o}); chmod 600 {path}")
    return out
