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

Every text passes through `redact.redact_text` in memory before anything is written; fleet.yaml instead through
`redact.redact_structure` (its parsed structure, so no YAML layout hides a secret; written back without its
comments). Each secret value found anywhere, and the spec's `api_key`, is then scrubbed from every file by value
(`redact.scrub_known`): a log that prints the key bare names no variable. The tar holds only the redacted text
and `manifest.json` lists each redaction (kind, file, line, variable name; never the value).
Parts that cannot be read (a stopped fleet, a missing tool, an unreachable node) are listed under
`unreachable` instead of failing the bundle. Files the bundle will not read are listed under `refused` with the
reason: a log or env.sh that is a symbolic link, a FIFO or a device, or one whose folder resolves outside the
node's run folder (`facts.logs.file_copy_fact` refuses them on the node itself).
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from p2p_ops import files
from p2p_ops.connectors.base import Result
from p2p_ops.diagnose import doctor, explain, judge
from p2p_ops.diagnose.explain.prompt import latest_failed_run
from p2p_ops.diagnose.redact import (Redaction, RedactionResult, manifest_entries, redact_structure,
                                     redact_text, scrub_known)
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

FORMAT = "p2p-bundle/1"
LOG_CAP_BYTES = 4 << 20
_BASE64_LINE = re.compile(r"^[A-Za-z0-9+/=]{16,}\\?n?\s*$")

Progress = Callable[[str], None]


@dataclass
class BundleWriter:
    """Collects redacted files in memory; `write` makes the tar.gz (nothing unredacted ever touches disk).
    `entries`, `unreachable` and `refused` are the manifest's rows as they are written."""

    root: str
    files: dict[str, bytes] = field(default_factory=dict)
    entries: list[dict] = field(default_factory=list)
    redactions: list[Redaction] = field(default_factory=list)
    unreachable: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    # Secret values the tool knows (the spec's, and each one masked in any file) -> their name: `write` removes
    # them from every file, where a log prints one bare (`used key Zq8x...`).
    known: dict[str, str] = field(default_factory=dict)

    def add_text(self, path: str, text: str, what: str, source: str, truncated: bool = False) -> None:
        self._add(path, redact_text(text, where=path), what, source, truncated)

    def add_spec(self, path: str, text: str, source: str) -> None:
        """A fleet spec, redacted from its parsed structure (every YAML layout of a secret); one that does not
        parse is left out, not copied."""
        try:
            result = redact_structure(text, path)
        except BadInput as exc:
            self.missing("the fleet spec", source, f"not copied: {exc}")
            return
        self._add(path, result, "the fleet spec, written back from its parsed structure with secrets masked "
                                "(comments and layout not kept)", source, False)

    def _add(self, path: str, result: RedactionResult, what: str, source: str, truncated: bool) -> None:
        data = result.text.encode("utf-8", errors="replace")
        self.files[path] = data
        self.redactions += result.redactions
        self.known.update(result.values)
        self.entries.append({"path": path, "what": what, "source": source, "bytes": len(data),
                             "redactions": len(result.redactions), "truncated": truncated})

    def add_json(self, path: str, obj: Any, what: str, source: str) -> None:
        self.add_text(path, json.dumps(obj, indent=2, default=str) + "\n", what, source)

    def merge(self, part: BundleWriter) -> None:
        for name in ("files", "known"):
            getattr(self, name).update(getattr(part, name))
        for name in ("entries", "redactions", "unreachable", "refused"):
            getattr(self, name).extend(getattr(part, name))

    def scrub_known(self) -> None:
        """Remove every known secret value from every file, wherever it was learnt (files before env.sh too)."""
        counts = {}
        for path, data in self.files.items():
            result = scrub_known(data.decode("utf-8"), self.known, path)
            if result.redactions:
                self.files[path] = result.text.encode("utf-8")
                self.redactions += result.redactions
                counts[path] = len(result.redactions)
        for entry in self.entries:
            entry["redactions"] += counts.get(entry["path"], 0)
            entry["bytes"] = len(self.files.get(entry["path"], b""))
        for item in self.unreachable + self.refused:
            why = "error" if "error" in item else "reason"
            item[why] = scrub_known(item[why], self.known, "manifest").text

    def refuse(self, what: str, source: str, reason: str) -> None:
        self.refused.append({"what": what, "source": source, "reason": redact_text(reason, "manifest").text[:500]})

    def missing(self, what: str, source: str, error: str) -> None:
        self.unreachable.append({"what": what, "source": source,
                                 "error": redact_text(str(error), "manifest").text[:500]})

    def manifest(self, extra: dict) -> dict:
        by_kind = dict(Counter(r.kind for r in self.redactions))
        return {
            "format": FORMAT, **extra,
            "files": self.entries,
            "redactions": manifest_entries(self.redactions),
            "redaction_summary": {"total": len(self.redactions), "by_kind": by_kind,
                                  "files": sorted({r.where for r in self.redactions})},
            "unreachable": self.unreachable,
            "refused": self.refused,
        }

    def write(self, out: Path, extra: dict, force: bool = False) -> dict:
        self.scrub_known()
        manifest = self.manifest(extra)
        files.make_dirs(out.parent)
        # A fresh private temp file (O_EXCL, 0600): a planted `<out>.tmp` symlink is never followed.
        fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        tmp = Path(tmp_name)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            items = [("manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())] + sorted(self.files.items())
            for path, data in items:
                info = tarfile.TarInfo(f"{self.root}/{path}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
        tmp.chmod(0o600)
        if force:
            tmp.replace(out)
            return manifest
        try:  # a hard link never replaces: a file that appeared meanwhile (or a planted symlink) stays as it is
            os.link(tmp, out)
        except FileExistsError:
            raise BadInput(f"{out} exists; name a new file or add --force to replace it") from None
        finally:
            tmp.unlink(missing_ok=True)
        return manifest


# ---- reading from nodes and endpoints ---------------------------------------------------------------------

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


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


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
        w.add_json(f"{base}/facts/{fact.name}.json", _jsonable(fact.parse(res.output)),
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
        _, ex = explain.run_saved(ctx, str(folder), judged)
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
            w.add_json("doctor.json", {"report": report.to_dict(), "facts": facts.to_dict()},
                       "`p2pctl doctor --json`: findings and the facts they came from", "p2pctl doctor")
            w.add_text("doctor.txt", "\n".join(doctor.summary_lines(report)) + "\n", "`p2pctl doctor` output",
                       "p2pctl doctor")
            # The one judge's answer, as every other verb gives it (redacted: a finding quotes what it saw).
            judged = judge.judgement(facts, report)
            cause = redact_text(judged.cause(), "manifest.json").text
            doctor_summary = {"exit_code": report.exit_code, "problems": len(report.problems), "likely_cause": cause}
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
            lines.append(f"likely cause: {doc['likely_cause']}")
    return lines
