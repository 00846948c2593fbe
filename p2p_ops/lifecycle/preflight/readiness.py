"""From probed facts and the fleet's plan to problems (the launch would fail or share nothing) and warnings, each
the catalogue's verdict about the node: what was seen, and the fix the catalogue words, e.g. (`Verdict.line`)
`port 8081 (h1-0 http) is held by nginx pid 911 on 0.0.0.0: stop what holds it, or pick another port ...`.
"""

from __future__ import annotations

from p2p_ops.causes import Verdict, verdict
from p2p_ops.spec.model import Fleet, Node

LMCACHE_PIN = "0.5.6"
MIN_FREE_DISK = 5 * 2**30
MIN_FREE_DISK_VLLM = 50 * 2**30


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def assess_node(fleet: Fleet, node: Node, probe) -> None:
    def said(cause: str, seen: str, **values: object) -> Verdict:
        return verdict(cause, node.name, ("probe", seen), **values)

    problems, warnings = probe.problems, probe.warnings
    py = probe.python
    if py is None or not py.present:
        problems.append(said("python_missing", py.error if py else "python not probed"))
    else:
        lmcache = py.version_of("lmcache")
        if not lmcache:
            problems.append(said("lmcache_missing", f"lmcache is not installed in {py.executable}"))
        elif lmcache != LMCACHE_PIN:
            warnings.append(said("lmcache_untested", f"lmcache {lmcache} (this toolkit is tested with {LMCACHE_PIN})",
                                 pin=LMCACHE_PIN))
        if fleet.settings.transfer_engine == "nixl" and not py.version_of("nixl"):
            problems.append(said("nixl_missing", f"nixl is not installed in {py.executable}, and transfer_engine is "
                                 "nixl"))
        if why := mooncake_problem(fleet.settings.transfer_engine, py):
            problems.append(said("mooncake_broken", why))
        # A vLLM venv of its own is checked by `up`'s preflight, which knows where it is.
        if fleet.runtime == "vllm" and not (node.vllm_venv or fleet.vllm.venv) and not py.version_of("vllm"):
            problems.append(said("vllm_missing", f"runtime is vllm but vllm is not installed in {py.executable}"))
    _assess_gpus(fleet, node, probe)
    problems += [said("port_busy", f"port {pc.port} ({pc.role}) is held by {pc.holder}")
                 for pc in probe.ports if pc.state == "busy"]
    if probe.rdma and probe.memlock is not None and not probe.memlock.unlimited:
        soft = "unknown" if probe.memlock.soft is None else f"{probe.memlock.soft // 1024} KiB"
        warnings.append(said("memlock", f"memlock limit is {soft} with RDMA devices present"))
    need = MIN_FREE_DISK_VLLM if fleet.runtime == "vllm" else MIN_FREE_DISK
    if probe.disk is not None and probe.disk.avail_bytes < need:
        warnings.append(said("disk_low", f"only {_gib(probe.disk.avail_bytes)} free on {probe.disk.mount} (run dir "
                             f"{probe.disk_path})", mount=probe.disk.mount, need=_gib(need)))
    mc = probe.model_cache
    if mc is not None and not mc.present:
        warnings.append(said("model_not_cached", f"model {fleet.model} is not in the cache ({mc.path})",
                             model=fleet.model))


def mooncake_problem(engine: str, py) -> str:
    """Why a mooncake_te fleet's servers cannot start from this interpreter (`PythonEnv`); "" when they can or
    the fleet is on another engine. Its cause is the catalogue's `mooncake_broken`."""
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
        probe.problems.append(verdict("no_gpu", node.name, ("probe", "runtime is vllm but no GPU is visible "
                                                            f"(nvidia-smi {'absent' if gpus is None else 'lists none'})")))
        return
    have = {g.index for g in gpus or []}
    missing = [g for g in wanted if g not in have]
    if missing and gpus is not None:
        probe.problems.append(verdict("gpus_missing", node.name, (
            "probe", f"instances ask for GPU(s) {missing} but the node has {sorted(have) or 'none'}"),
            have=sorted(have) or "none"))


def assess_fleet(fleet: Fleet, probes: dict) -> None:
    # Versions must agree across peers (decision 6: mismatches share nothing).
    for pkg in ("lmcache", "nixl", "vllm"):
        seen = {name: p.python.version_of(pkg) for name, p in probes.items()
                if p.python is not None and p.python.present and p.python.version_of(pkg)}
        if len(set(seen.values())) > 1:
            listing = ", ".join(f"{n}={v}" for n, v in sorted(seen.items()))
            for name in seen:
                probes[name].problems.append(verdict("versions_differ", name, (
                    "probe", f"{pkg} versions differ across nodes ({listing})"), package=pkg,
                    restart="`p2pctl up` after the install"))
