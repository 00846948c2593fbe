"""The starter fleet `p2pctl init --local N` writes (and the demo and tests launch): N single-instance nodes on
loopback, as plain data ready for YAML."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec import ports as port_defaults
from p2p_ops.spec.settings import EngineSettings, PrometheusSettings, Settings, VllmSettings
from p2p_ops.spec.sizing import size_nodes
from p2p_runtime.profiles import PROFILE_NAMES, TINY
from p2p_runtime.profiles import resolve as resolve_profile


def local_fleet(n: int, name: str = "local", base: Optional[dict[str, int]] = None,
                runtime: str = "embedded", vllm: Optional[dict[str, Any]] = None,
                cpu_count: int = 1, profile: str = TINY, memory_budget_gib: Optional[float] = None) -> dict[str, Any]:
    """runtime "vllm" gives a CPU fleet (vLLM's CPU build) sized for a small box: 1 GiB of vLLM KV cache and
    1 GiB of L1 per instance, each vLLM's threads bound to its own core (of cpu_count) where there are enough;
    `vllm` adds or overrides keys of the `vllm:` section (model_path, venv).

    runtime "embedded" stores KV at `profile`'s geometry (p2p_runtime.profiles): chunk, block and L1 page sizes
    follow it, and L1 and engine KV per node are sized for `memory_budget_gib` (spec.sizing; None: the most
    generous size, which is today's defaults for the tiny profile).
    """
    if n < 1 or n > 64:
        raise BadInput(f"--local {n}: choose between 1 and 64 nodes")
    b = port_defaults.default_base() | (base or {})
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        letter = chr(ord("a") + i) if i < 26 else f"n{i}"
        nodes.append({"name": f"node-{letter}", "address": "127.0.0.1", "connection": "local",
                      "instances": [{"id": f"node-{letter}-0", "ports": port_defaults.local_instance_ports(b, i)}]})
    data: dict[str, Any] = {"name": name, "runtime": runtime, "model": "tiny-llm",
                            "coordinator": {"host": "127.0.0.1", "port": b["coordinator"]},
                            "settings": Settings(server_nice=10).model_dump()}
    if runtime == "vllm":
        data["vllm"] = VllmSettings(device="cpu", max_model_len=4096, enforce_eager=True).model_dump(
            exclude={"block_size", "gpu_memory_utilization"}) | (vllm or {})
        for i, node in enumerate(nodes):
            node["instances"][0]["cpus"] = str(i % cpu_count) if cpu_count > 1 else ""
    else:
        data["settings"], data["engine"] = profile_sections(n, profile, memory_budget_gib)
    data["nodes"] = nodes
    # Prometheus' default port, or the next one up that the fleet itself does not use (a port offset can move
    # the coordinator onto the default).
    default = prom = PrometheusSettings.model_fields["port"].default
    taken = port_defaults.local_fleet_ports(b, n)
    while prom in taken:
        prom += 1
    if prom != default:
        data["prometheus"] = {"port": prom}
    return data


# A real profile's lookup waits for a pull of up to a whole context (hundreds of MiB): the tiny profile's 2 s would
# count a slow-but-working pull on a busy box as a failure and recompute.
REAL_PROFILE_LMCACHE_TIMEOUT_S = 10.0


def profile_sections(n: int, profile: str, memory_budget_gib: Optional[float]) -> tuple[dict, dict]:
    engine = EngineSettings()
    try:
        kv = resolve_profile(profile, engine.num_layers, engine.num_heads, engine.head_size)
    except ValueError:
        raise BadInput(f"--profile {profile}: use one of {', '.join(PROFILE_NAMES)}") from None
    size = size_nodes(n, kv, memory_budget_gib)
    # A real profile's retrieve over pickled tensors ran at ~10 MB/s here (128 MiB: 12.5 s, pickle.dumps alone
    # 3.8 s on the busy box), past the engine's timeout: the shared-memory L1 skips the pickling.
    settings = Settings(server_nice=10, chunk_size=kv.chunk_size, l1_align_bytes=kv.l1_align_bytes,
                        l1_size_gb=size.l1_size_gb, shm_transport=profile != TINY)
    engine = EngineSettings(profile=profile, block_size=kv.block_size, max_model_len=size.max_model_len,
                            num_blocks=size.num_blocks, lmcache_timeout=engine.lmcache_timeout if profile == TINY
                            else REAL_PROFILE_LMCACHE_TIMEOUT_S)
    return settings.model_dump(), engine.model_dump()


# `init --runtime vllm`'s defaults: the venv `make setup-vllm` makes in the checkout, and the model folder
# `p2pctl make-model` is told to make beside the fleet file.
DEFAULT_VLLM_VENV = CHECKOUT / ".venv-vllm"
DEFAULT_MODEL_DIR = "models/tiny-llama"


def vllm_paths(fleet_file: Path, model_path: Optional[str] = None, venv: Optional[str] = None) -> dict[str, str]:
    """Absolute `vllm.model_path` and `vllm.venv` for a starter fleet, so the file means the same wherever it is
    read from (engines start in their own run folders). Paths given on the command line are taken from the
    current folder, as the shell that typed them does; the defaults are DEFAULT_VLLM_VENV and DEFAULT_MODEL_DIR
    in the fleet file's folder."""
    model = Path(model_path) if model_path else fleet_file.parent / DEFAULT_MODEL_DIR
    env = Path(venv) if venv else DEFAULT_VLLM_VENV
    return {"model_path": os.path.abspath(model.expanduser()), "venv": os.path.abspath(env.expanduser())}


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


HEADER = ("# Fleet spec written by `p2pctl init`. Edit freely; `p2pctl validate` checks it.\n"
          "# settings: must be identical across peers (instances may override only l1_size_gb, eviction,\n"
          "# timeouts, heartbeat, log level, nice and UCX settings under instances[].settings).\n")


def starter_yaml(data: dict[str, Any]) -> str:
    return HEADER + dump_yaml(data)


def write_starter(out: Path, data: dict[str, Any], force: bool = False) -> Path:
    """0600 when it holds an API key, which nobody else should read."""
    if (out.exists() or out.is_symlink()) and not force:
        raise BadInput(f"{out} already exists; pass --force to overwrite it or -o to write elsewhere")
    return files.write_text(out, starter_yaml(data), 0o600 if data.get("api_key") else 0o644)


def vllm_missing(model_path: str, venv: str) -> list[str]:
    """What a vLLM starter fleet still lacks on this machine, each with the command that makes it."""
    return [f"{need} does not exist yet; make it with `{hint}`" for need, hint in (
        (Path(model_path).resolve() / "config.json", f"p2pctl make-model {model_path}"),
        (Path(venv).resolve() / "bin" / "python", "make setup-vllm")) if not need.exists()]
