"""The fleet's own Prometheus: config rendered from the fleet, the real `prometheus` binary, tsdb in the run folder."""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

import jinja2
import requests

from p2p_ops import files
from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.logs import log_excerpt_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.resources import template_text
from p2p_ops.spec.layout import PROMETHEUS
from p2p_ops.spec.model import hostport


def prom_dir(ctx: FleetContext) -> Path:
    return ctx.layout.dir(PROMETHEUS)


def url(ctx: FleetContext) -> str:
    return ctx.unit("prometheus").url


RULES_FILE = "rules.yml"


def _render(template: str, **values: object) -> str:
    env = jinja2.Environment(
        # Package data, not a folder next to this file: an installed wheel has no checkout around it.
        loader=jinja2.FunctionLoader(template_text),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # `address | hp(port)`: host:port with an IPv6 address in brackets, as every URL needs.
    env.filters["hp"] = lambda address, port: hostport(str(address), port)
    return env.get_template(template).render(**values)


def render_config(ctx: FleetContext, rules_file: str | None = None) -> str:
    return _render("prometheus.yml.j2", fleet=ctx.fleet, interval=f"{ctx.fleet.prometheus.scrape_interval_s:g}s",
                   rules_file=rules_file or str(prom_dir(ctx) / RULES_FILE))


def render_rules(fleet) -> str:
    """Alert and recording rules for this fleet: every server expects all other servers as peers."""
    n = len(fleet.instances())
    return _render("prometheus_rules.yml.j2", fleet=fleet, n_servers=n, expected_peers=max(n - 1, 0))


def ready(ctx: FleetContext) -> bool:
    return ctx.unit("prometheus").ready()


def write_files(ctx: FleetContext, binary: str) -> None:
    """Its config, rules and wrapper in the run folder's prometheus/ (0700), replacing any link planted there."""
    d = files.private_dir(prom_dir(ctx))
    files.private_dir(d / "data")
    files.write_text(d / RULES_FILE, render_rules(ctx.fleet))
    files.write_text(d / "prometheus.yml", render_config(ctx))
    p = ctx.fleet.prometheus
    q = shlex.quote
    files.write_text(d / "start_prometheus.sh",
        "#!/usr/bin/env bash\n# Runs the fleet's Prometheus in the foreground; `p2pctl prometheus up` starts it detached.\n"
        "set -euo pipefail\n"
        f"exec {q(binary)} --config.file={q(str(d / 'prometheus.yml'))} "
        f"--storage.tsdb.path={q(str(d / 'data'))} --storage.tsdb.retention.time={q(p.retention)} "
        f"--web.listen-address={q(hostport(p.host, p.port))} --web.enable-lifecycle\n", 0o700)


def up(ctx: FleetContext, timeout: float = 60.0) -> str:
    """Start (or find running) Prometheus for this fleet; its URL once /-/ready answers."""
    if not (binary := shutil.which("prometheus")):
        raise CouldNotRun("the `prometheus` binary is not installed; install the Debian package: "
                          "apt-get install prometheus")
    write_files(ctx, binary)
    conn = ctx.conn(None)
    proc = ctx.proc("prometheus")
    if procs.start(conn, proc).kept:
        # Already running: make it read the config and rules just written.
        try:
            requests.post(url(ctx) + "/-/reload", timeout=10)
        except requests.RequestException:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Ours must be alive as well as something answering: a Prometheus left on this port by another run would
        # answer /-/ready while ours exits, unable to bind. Only a gone pid counts: raising while ours still runs
        # (a pid file judged "stale" for a moment) would leave it running with nobody to stop it.
        st = procs.states(conn, [proc])[0]
        if st.state in ("dead", "none"):
            p = ctx.fleet.prometheus
            taken = (f"\n{hostport(p.host, p.port)} is answered by another Prometheus (not this fleet's): stop it, "
                     "or set prometheus.port in fleet.yaml to a free port") if ready(ctx) else ""
            raise CouldNotRun(f"prometheus exited during start (its pid file: {st.state}); from {proc.log}:\n"
                              + read_fact(conn, log_excerpt_fact(proc.log, 10), timeout=15) + taken)
        if ready(ctx):
            return url(ctx)
        time.sleep(0.5)
    raise CouldNotRun(f"prometheus did not answer {url(ctx)}/-/ready within {timeout:.0f} s; see {proc.log}")


def down(ctx: FleetContext) -> str:
    return procs.stop(ctx.conn(None), ctx.proc("prometheus"))


def running(ctx: FleetContext) -> bool:
    return procs.states(ctx.conn(None), [ctx.proc("prometheus")])[0].running


def state(ctx: FleetContext) -> str:
    """ready (answers /-/ready), not ready (its process runs but does not answer yet) or not running."""
    if not running(ctx):
        return "not running"
    return "ready" if ready(ctx) else "not ready"
