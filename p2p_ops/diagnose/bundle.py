"""Debug bundle (`p2pctl bundle`, `scripts/collect_bundle.sh`): one tar.gz to attach to an issue.

Layout inside `p2p-bundle-<fleet>-<UTC>/`::

    manifest.json                  what each file is, where it came from, its size, redactions, unreachable parts
    fleet.yaml  doctor.txt  doctor.json  explain.txt  explain.json (the last request that missed the cache)
    coordinator/   env.sh  start_coordinator.sh  coordinator.log  healthz.json  instances.json  metrics.txt
    nodes/<node>/  packages.json  tools/<fact>.txt|.rc  facts/<fact>.json      (replayable: p2pctl rdma --root)
    nodes/<node>/<instance>/  env.sh  start_*.sh  server.log  engine.log  status.json  config.json
                              lmc_version.json  version.json  server_metrics.txt  engine_metrics.txt
    router/        env.sh  start_router.sh  router.log  status.json  workers.json  metrics.txt  (router.enabled)
    prometheus/    prometheus.yml  prometheus.log                                (if the fleet ran one)

The writer (`bundle_writer`) redacts every file in memory; the tar holds only redacted text.
Parts that cannot be read (a stopped fleet, a missing tool, an unreachable node) are listed under
`unreachable` instead of failing the bundle. Files the bundle will not read are listed under `refused` with the
reason: a log or env.sh that is a symbolic link, a FIFO or a device, or one whose folder resolves outside the
node's run folder (`facts.logs.file_copy_fact` refuses them on the node itself).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import files
from p2p_ops.connectors.base import Result
from p2p_ops.diagnose import doctor, explain, judge
from p2p_ops.diagnose.bundle_writer import BundleWriter
from p2p_ops.diagnose.explain.prompt import latest_failed_run
from p2p_ops.diagnose.redact import redact_text
from p2p_ops.endpoints import fetch
from p2p_ops.errors import BadInput
from p2p_ops.facts import TOOL_LABELS, node_facts
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import file_copy_fact
from p2p_ops.facts.paths import paths_fact
from p2p_ops.facts.sections import read_fact, read_node
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import bin_dir_for, vllm_python
from p2p_ops.spec.layout import BUNDLES, PROMETHEUS
from p2p_ops.spec.model import Node, hostport
from p2p_ops.spec.units import Unit

LOG_CAP_BYTES = 4 << 20
_BASE64_LINE = re.compile(r"^[A-Za-z0-9+/=]{16,}\\?n?\s*$")

Progress = Callable[[str], None]


def trim_partial_head(text: str) -> str:
    """A log cut at a byte offset starts mid-line, maybe inside a private-key block whose BEGIN line is gone:
    drop the partial first line and any key-material-looking lines after it (redaction needs the BEGIN line)."""
    lines = text.split("\n")[1:]
    while lines and _BASE64_LINE.match(lines[0]):
        lines.pop(0)
    return "\n".join(lines)


_REFUSED = "not read: "


def read_remote(conn, path: str, cap: int = LOG_CAP_BYTES, within: Optional[str] = None
                ) -> tuple[Optional[str], int, str]:
    """(text or None, size in bytes, error): at most `cap` bytes from the end (`facts.logs.file_copy_fact`);
    a file it refuses (a link, a FIFO, outside `within`) gives None and `not read: <why>`."""
    try:
        copy = read_fact(conn, file_copy_fact(path, cap, within), timeout=60)
    except Exception as exc:  # noqa: BLE001 - an unreachable node is a manifest entry, not a failure
        return None, 0, str(exc)
    if not copy.exists:
        return None, 0, "no such file"
    if copy.refused:
        return None, 0, _REFUSED + copy.refused
    return (trim_partial_head(copy.text) if copy.truncated(cap) else copy.text), copy.size, ""


def _add_remote(w: BundleWriter, conn, node: str, path: str, dest: str, what: str, within: str) -> None:
    text, size, err = read_remote(conn, path, within=within)
    source = f"{node}:{path}"
    if err.startswith(_REFUSED):
        w.refuse(what, source, err.removeprefix(_REFUSED))
    elif text is None:
        w.missing(what, source, err or "no such file")
    else:
        w.add_text(dest, text, what, source, truncated=size > LOG_CAP_BYTES)


def _add_http(w: BundleWriter, url: str, dest: str, what: str, as_json: bool) -> None:
    body = fetch.get_json(url) if as_json else fetch.get_text(url)
    if body is None:
        w.missing(what, url, "no answer (process stopped or endpoint missing)")
    elif as_json:
        w.add_json(dest, body, what, url)
    else:
        w.add_text(dest, body, what, url)


def bundle_batch(ctx: FleetContext, node: Node) -> dict[str, CommandFact]:
    """What the bundle reads on a node in one round trip (`facts.node_facts`): interpreters, host, every command
    fact."""
    vllm = ctx.fleet.runtime == "vllm"
    return node_facts(("python", *(("vllm_python",) if vllm else ()), "host_txt", *TOOL_LABELS),
                      f"{bin_dir_for(node)}/python", vllm_python=vllm_python(ctx.fleet, node) if vllm else "")


def _add_tool(w: BundleWriter, base: str, node, fact: CommandFact, res: Result) -> None:
    """One command fact (ibverbs, rdma link, topology, ucx_info, ulimit, lsmod), raw and parsed."""
    cmd, src = fact.shell, f"{node.name}: {fact.shell}"
    if res.exit_code == -1 or res.not_found or "command not found" in res.output[-200:]:
        why = (res.stderr or "cut short") if res.exit_code == -1 else "not installed"
        w.missing(f"fact {fact.name} on {node.name}", src, why)
        return
    w.add_text(f"{base}/tools/{fact.name}.txt", res.output, f"output of `{cmd}`", src)
    if res.exit_code:
        w.add_text(f"{base}/tools/{fact.name}.rc", f"{res.exit_code}\n", f"exit code of `{cmd}`", src)
    try:
        w.add_json(f"{base}/facts/{fact.name}.json", fact.parse(res.output),
                   f"`{cmd}` parsed by p2p_ops.facts", src)
    except Exception as exc:  # noqa: BLE001 - the raw output is kept either way
        w.missing(f"parsed fact {fact.name}", src, f"parser failed: {exc}")


def _add_node(w: BundleWriter, ctx: FleetContext, node: Node, states: dict[str, str]) -> None:
    base = f"nodes/{node.name}"
    batch = bundle_batch(ctx, node)
    try:
        read = read_node(ctx.conn(node), batch, timeout=120)
    except Exception as exc:  # noqa: BLE001
        w.missing(f"facts of node {node.name}", node.name, str(exc))
        return  # the node is unreachable: nothing else will work either
    for label, fact in batch.items():
        res = read[label]
        if label.endswith("python"):
            whose = "vLLM's interpreter" if label == "vllm_python" else "the node's interpreter (servers)"
            env = fact.parse(res.output)
            if env.present:  # packages.json, vllm_packages.json
                w.add_json(f"{base}/{label.replace('python', 'packages')}.json", env.to_json(),
                           f"python and package versions (lmcache, nixl, torch, vllm) of {whose}",
                           f"{node.name}: {env.executable}")
            else:
                w.missing(f"package versions of {whose}", f"{node.name}: {env.executable}", env.error)
        elif label == "host_txt":
            w.add_text(f"{base}/host.txt", res.output, "uname -a, hostname, CPUs, ulimit -l", f"{node.name}: uname")
        else:
            _add_tool(w, base, node, fact, res)
    for unit in ctx.units(node):
        _add_unit(w, ctx, unit, states)


# What the bundle reads over HTTP from a running unit: (path, file in its bundle folder, what it is, as JSON).
_HTTP = {
    "coordinator": (("/healthz", "healthz.json", "/healthz", True),
                    ("/instances", "instances.json", "/instances (membership)", True),
                    ("/metrics", "metrics.txt", "metrics", False)),
    "server": (("/status", "status.json", "/status", True), ("/config", "config.json", "/config", True),
               ("/lmc_version", "lmc_version.json", "/lmc_version", True), ("/version", "version.json", "/version", True),
               ("/metrics", "server_metrics.txt", "metrics", False)),
    "engine": (("/metrics", "engine_metrics.txt", "metrics", False),),
}


def _add_unit(w: BundleWriter, ctx: FleetContext, unit: Unit, states: dict[str, str]) -> None:
    """One unit's env.sh (once per folder), start wrapper, log (and the previous run's), and what it serves."""
    conn, lay, proc = ctx.conn(unit.node), ctx.node_layout(unit.node), ctx.proc(unit)
    node = unit.node.name if unit.node is not None else "local"
    iid = unit.instance.id if unit.instance is not None else ""
    d = f"nodes/{node}/{iid}" if iid and unit.node is not None else unit.folder

    def what(thing: str) -> str:
        return f"{unit.role} {thing} of {iid}" if iid else f"{unit.role} {thing}"

    root = str(lay.root)
    if unit.role != "engine":  # an instance's server and engine share one env.sh
        _add_remote(w, conn, node, str(lay.env(unit.folder)), f"{d}/env.sh", f"env.sh of {iid}" if iid else what("env.sh"),
                    root)
    _add_remote(w, conn, node, proc.wrapper, f"{d}/start_{unit.role}.sh", what("start wrapper"), root)
    _add_remote(w, conn, node, proc.log, f"{d}/{unit.role}.log", what("log"), root)
    previous = proc.log + ".1"
    if read_fact(conn, paths_fact({previous: "file"}), timeout=10)[previous]:
        _add_remote(w, conn, node, previous, f"{d}/{unit.role}.log.1", what("log") + " (previous run)", root)
    state = states.get(unit.name, "unknown")
    if unit.role == "router":  # its worker list, and its own metrics on its Prometheus port (not /metrics)
        st = fleet_router.status(ctx)
        w.add_json("router/status.json", st.to_json(), "router health and worker list", st.url)
        if st.healthy:
            _add_http(w, st.url + "/workers", "router/workers.json", "router /workers", True)
            prom = f"http://{hostport(unit.node.address, ctx.fleet.router.prometheus_port)}/metrics"
            _add_http(w, prom, "router/metrics.txt", "router metrics (vllm_router_*)", False)
    elif _HTTP.get(unit.role) and state != "running":
        w.missing(what(", ".join(path for path, *_ in _HTTP[unit.role])), unit.url, f"{unit.role} process {state}")
    else:
        for path, name, thing, as_json in _HTTP.get(unit.role, ()):
            _add_http(w, unit.url + path, f"{d}/{name}", what(thing), as_json)


def _add_prometheus(w: BundleWriter, ctx: FleetContext) -> None:
    """The fleet's own Prometheus (`p2pctl prometheus up`) runs on this machine, under the run folder; only
    what it left there (a fleet that never ran one has nothing to show)."""
    pdir = ctx.layout.dir(PROMETHEUS)
    for name, what in (("prometheus.yml", "Prometheus config"), ("prometheus.log", "Prometheus log")):
        if (pdir / name).exists() or (pdir / name).is_symlink():
            _add_remote(w, ctx.conn(None), "local", str(pdir / name), f"prometheus/{name}", what, str(ctx.layout.root))


def _add_explain(w: BundleWriter, ctx: FleetContext, progress: Progress, judged: Optional[judge.Judgement]) -> None:
    """`p2pctl explain` on the last saved request that missed the cache (a failed proof), if there is one, with the
    judge's answer the doctor's read gave (None: explain asks the judge itself)."""
    try:
        folder = latest_failed_run(ctx.layout.tests)
    except BadInput as exc:  # a saved run's prompts.jsonl of another shape: named, the bundle goes on
        w.missing("explain", "p2pctl explain --run", str(exc))
        return
    if folder is None:
        return
    progress(f"explaining the last request that missed the cache ({folder.name})")
    try:
        _, ex = explain.run_saved(ctx, str(folder), (lambda: judged) if judged else None)
        w.add_json("explain.json", ex.to_dict(), "`p2pctl explain --json` on the last request that missed the cache",
                   f"p2pctl explain --run {folder}")
        w.add_text("explain.txt", "\n".join(explain.render_text(ex)) + "\n", "`p2pctl explain` output",
                   f"p2pctl explain --run {folder}")
    except Exception as exc:  # noqa: BLE001 - one failing part must not fail the bundle
        w.missing("explain", f"p2pctl explain --run {folder}", f"{type(exc).__name__}: {exc}")


def collect(ctx: FleetContext, out: Optional[Path] = None, with_doctor: bool = True, progress: Progress = lambda _: None,
            force: bool = False) -> dict:
    """Build the bundle; returns the manifest (plus `path`). Works on a stopped fleet."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    w = BundleWriter(f"p2p-bundle-{ctx.fleet.name}-{stamp}")
    out = Path(out) if out else ctx.layout.root / BUNDLES / f"{w.root}.tar.gz"
    if ctx.fleet.api_key:
        w.known[ctx.fleet.api_key] = "api_key"
    w.add_spec("fleet.yaml", files.read_text(ctx.fleet_file, 4 << 20), str(ctx.fleet_file))
    states: dict[str, str] = {}
    for name, res in ctx.for_each_node(lambda n: procs.states(ctx.conn(n), ctx.procs(n))).items():
        if isinstance(res, Exception):
            w.missing(f"process states on {name}", name, str(res))
        else:
            states.update({st.name: st.state for st in res})
    progress(f"processes: {sum(s == 'running' for s in states.values())}/{len(states)} running")
    progress(f"collecting {len(ctx.fleet.nodes)} node(s)")

    def node_part(node: Node) -> BundleWriter:
        part = BundleWriter(w.root)
        _add_node(part, ctx, node, states)
        return part

    # Each node is about twenty reads over its connection: nodes side by side (bench/suite/fleet_scale measured the
    # serial walk at 33 of 45 s on 8 hosts), merged back in the spec's order so the bundle stays deterministic.
    for name, part in ctx.for_each_node(node_part).items():
        if isinstance(part, Exception):
            w.missing(f"node {name}", name, f"{type(part).__name__}: {part}")
        else:
            w.merge(part)
    _add_prometheus(w, ctx)
    doctor_summary, judged = None, None
    if with_doctor:
        progress("running the fleet doctor")
        try:
            facts, report = doctor.run(ctx)
            w.add_json("doctor.json", {"report": judge.fleet.document(facts, report), "facts": facts.to_dict()},
                       "`p2pctl doctor --json`: findings and the facts they came from", "p2pctl doctor")
            w.add_text("doctor.txt", "\n".join(doctor.summary_lines(report)) + "\n", "`p2pctl doctor` output",
                       "p2pctl doctor")
            # The one judge's answer, as every other verb gives it (redacted: a finding quotes what it saw).
            judged = judge.judgement(facts, report)
            v = judged.cause()
            doctor_summary = {"exit_code": report.exit_code, "problems": len(report.problems),
                              "likely_cause": _redacted(judged.said()), "cause": _redacted(v.to_dict()) if v else None}
        except Exception as exc:  # noqa: BLE001
            w.missing("doctor", "p2pctl doctor", f"{type(exc).__name__}: {exc}")
        _add_explain(w, ctx, progress, judged)
    extra = {"fleet": ctx.fleet.name, "created_utc": stamp, "tool": "p2pctl bundle",
             "fleet_file": str(ctx.fleet_file), "run_dir": str(ctx.layout.root),
             "nodes": [{"name": n.name, "address": n.address, "connection": n.connection} for n in ctx.fleet.nodes],
             "processes": states, "doctor": doctor_summary}
    manifest = w.write(out, extra, force=force)
    manifest["path"] = str(out)
    manifest["size_bytes"] = out.stat().st_size
    return manifest


def summary_lines(manifest: dict) -> list[str]:
    red = manifest["redaction_summary"]
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(red["by_kind"].items())) or "none"
    lines = [f"bundle: {manifest['path']} ({manifest['size_bytes']:,} bytes, {len(manifest['files'])} files)",
             f"redacted: {red['total']} secret(s) ({kinds}) in {len(red['files'])} file(s); listed in manifest.json",
             f"not collected: {len(manifest['unreachable'])} item(s)"]
    lines += [f"  - {u['what']}: {u['error']}" for u in manifest["unreachable"][:8]]
    if manifest.get("refused"):
        lines.append(f"refused: {len(manifest['refused'])} file(s) not read (reasons in manifest.json)")
        lines += [f"  - {r['source']}: {r['reason']}" for r in manifest["refused"][:8]]
    if len(manifest["unreachable"]) > 8:
        lines.append(f"  ... {len(manifest['unreachable']) - 8} more in manifest.json")
    doc = manifest.get("doctor")
    if doc:
        lines.append(f"doctor: {'healthy' if doc['exit_code'] == 0 else str(doc['problems']) + ' problem(s)'} "
                     "(doctor.txt in the bundle)")
        if doc.get("likely_cause"):
            lines.append(f"likely cause{' (' + doc['cause']['id'] + ')' if doc.get('cause') else ''}: "
                         f"{doc['likely_cause']}")
    return lines


def _redacted(data):
    """Text, or a verdict's JSON, with every secret its strings quote redacted."""
    if isinstance(data, str):
        return redact_text(data, "manifest.json").text
    if isinstance(data, dict):
        return {k: _redacted(v) for k, v in data.items()}
    return [_redacted(x) for x in data] if isinstance(data, list) else data
