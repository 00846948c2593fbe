"""From probed facts and the fleet's plan to problems (the launch would fail or share nothing) and warnings.

Every message names the node, what is wrong and the fix, e.g.
`port 8081 (h1-0 http) is held by nginx pid 911 on 0.0.0.0; stop it or pick another port in fleet.yaml`.
"""

from __future__ import annotations

from p2p_ops.spec.model import Fleet, Node

LMCACHE_PIN = "0.5.6"
MIN_FREE_DISK = 5 * 2**30
MIN_FREE_DISK_VLLM = 50 * 2**30


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def assess_node(fleet: Fleet, node: Node, probe) -> None:
    problems, warnings = probe.problems, probe.warnings
    py = probe.python
    if py is None or not py.present:
        problems.append(f"{py.error if py else 'python not probed'}: create the virtualenv "
                        "(`p2pctl probe --bootstrap`) or fix the node's venv in fleet.yaml")
    else:
        lmcache = py.version_of("lmcache")
        if not lmcache:
            problems.append(f"lmcache is not installed in {py.executable}: install the node runtime there "
                            "(`make setup`, or README's node lines ending in pip install '.[node]')")
        elif lmcache != LMCACHE_PIN:
            warnings.append(f"lmcache {lmcache} (this toolkit is tested with {LMCACHE_PIN})")
        if fleet.settings.transfer_engine == "nixl" and not py.version_of("nixl"):
            problems.append(f"nixl is not installed in {py.executable}, and transfer_engine is nixl: "
                            "install nixl-cu12, then nixl with --no-deps (`make setup`)")
        problems += [f"{m}; {MOONCAKE_FIX}" for m in [mooncake_problem(fleet.settings.transfer_engine, py)] if m]
        # A vLLM venv of its own is checked by `up`'s preflight, which knows where it is.
        if fleet.runtime == "vllm" and not (node.vllm_venv or fleet.vllm.venv) and not py.version_of("vllm"):
            problems.append(f"runtime is vllm but vllm is not installed in {py.executable}: pip install vllm "
                            "(or set vllm.venv to the venv that holds it)")
    _assess_gpus(fleet, node, probe)
    for pc in probe.ports:
        if pc.state == "busy":
            problems.append(f"port {pc.port} ({pc.role}) is held by {pc.holder}; stop it or pick another port "
                            "in fleet.yaml")
    if probe.rdma and probe.memlock is not None and not probe.memlock.unlimited:
        soft = "unknown" if probe.memlock.soft is None else f"{probe.memlock.soft // 1024} KiB"
        warnings.append(f"memlock limit is {soft} with RDMA devices present: RDMA registration needs "
                        "`ulimit -l unlimited` (limits.conf or LimitMEMLOCK=infinity)")
    need = MIN_FREE_DISK_VLLM if fleet.runtime == "vllm" else MIN_FREE_DISK
    if probe.disk is not None and probe.disk.avail_bytes < need:
        warnings.append(f"only {_gib(probe.disk.avail_bytes)} free on {probe.disk.mount} (run dir "
                        f"{probe.disk_path}); logs and {'model weights' if fleet.runtime == 'vllm' else 'runs'} "
                        f"want more than {_gib(need)}")
    mc = probe.model_cache
    if mc is not None and not mc.present:
        warnings.append(f"model {fleet.model} is not in the cache ({mc.path}): vLLM will download it at start "
                        "(needs network and maybe HF_TOKEN); pre-fetch with `huggingface-cli download`")


MOONCAKE_FIX = ("run `make setup-mooncake` on that node, or `p2pctl probe --bootstrap` (the build matching the "
                "node; Debian libibverbs1 libnuma1 libcurl4 first: scripts/test_deps.sh), or use transfer_engine: nixl")


def mooncake_problem(engine: str, py) -> str:
    """Why a mooncake_te fleet's servers cannot start from this interpreter (`PythonEnv`); "" when they can or
    the fleet is on another engine."""
    if engine != "mooncake_te" or py is None or not py.present or py.mooncake == "ok":
        return ""
    if not py.mooncake:
        return f"transfer_engine is mooncake_te but no Mooncake wheel is installed in {py.executable}"
    return (f"transfer_engine is mooncake_te but Mooncake does not import in {py.executable} ({py.mooncake}): "
            "every lmcache server there exits at start, saying it \"requires the full lmcache installation with "
            "CUDA extensions\"")


def _assess_gpus(fleet: Fleet, node: Node, probe) -> None:
    wanted = sorted({i.gpu for i in node.instances if i.gpu is not None})
    gpus = probe.gpus
    if fleet.runtime == "vllm" and fleet.vllm.device == "cuda" and not gpus:
        probe.problems.append("runtime is vllm but no GPU is visible (nvidia-smi "
                              f"{'absent' if gpus is None else 'lists none'}); on CPU nodes use vllm.device: cpu "
                              "(vLLM's CPU build) or runtime: embedded")
        return
    have = {g.index for g in gpus or []}
    missing = [g for g in wanted if g not in have]
    if missing and gpus is not None:
        probe.problems.append(f"instances ask for GPU(s) {missing} but the node has {sorted(have) or 'none'}; "
                              "fix instances[].gpu")


def assess_fleet(fleet: Fleet, probes: dict) -> None:
    # Versions must agree across peers (decision 6: mismatches share nothing).
    for pkg in ("lmcache", "nixl", "vllm"):
        seen = {name: p.python.version_of(pkg) for name, p in probes.items()
                if p.python is not None and p.python.present and p.python.version_of(pkg)}
        if len(set(seen.values())) > 1:
            listing = ", ".join(f"{n}={v}" for n, v in sorted(seen.items()))
            for name in seen:
                probes[name].problems.append(f"{pkg} versions differ across nodes ({listing}): install the "
                                             "same version everywhere")
