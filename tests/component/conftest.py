"""Real processes on loopback for component tests: an ``lmcache server`` and engine subprocesses.

Everything is started on free ports, waited for with bounded polls, and stopped by PID at
teardown (also when a test fails): servers with SIGINT then SIGKILL, engines with SIGTERM then
SIGKILL. Failures carry the tail of the process log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from p2p_ops.lifecycle.free_ports import free_port

BIN = Path(sys.executable).parent
LMCACHE = BIN / "lmcache"
READY_RE = re.compile(r"engine ready on http://([\d.]+):(\d+)")

ENV = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1",
       "LMCACHE_DISABLE_BANNER": "1", "PYTHONWARNINGS": "ignore"}


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(predicate, what: str, timeout_s: float, log: Path | None = None,
               interval_s: float = 0.2):
    """Poll ``predicate`` until it returns a truthy value; raise with the log tail on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = f"\n--- log tail ---\n{log_tail(log)}" if log else ""
            raise TimeoutError(f"{what} not reached within {timeout_s:.0f}s{tail}")
        time.sleep(interval_s)


class _Process:
    """A detached child process with a log file, stopped by PID."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str]) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=ENV,
                                         start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _check_alive(self, what: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {self.proc.returncode}\n{log_tail(self.log)}")

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 20.0) -> int | None:
        """Send ``sig``, wait up to ``grace_s``, then SIGKILL; return the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(timeout=10)


class LMCacheServer(_Process):
    """``lmcache server`` in engine-driven CPU mode on free loopback ports."""

    def __init__(self, log: Path, extra: tuple[str, ...] = ()) -> None:
        super().__init__(log)
        self.port = free_port()
        self.http_port = free_port()
        self.extra = list(extra)

    @property
    def rpc_url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout_s: float = 120.0) -> "LMCacheServer":
        self._spawn([str(LMCACHE), "server", "--host", "127.0.0.1", "--port", str(self.port),
                     "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
                     "--l1-size-gb", "1", "--l1-init-size-gb", "1", "--eviction-policy", "LRU",
                     "--supported-transfer-mode", "auto", *self.extra])
        wait_until(self._healthy, f"lmcache server {self.http_url}/status", timeout_s, self.log,
                   interval_s=0.5)
        return self

    def _healthy(self) -> bool:
        self._check_alive("lmcache server")
        try:
            with urllib.request.urlopen(f"{self.http_url}/status", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGINT, grace_s: float = 15.0) -> int | None:
        return super().stop(sig, grace_s)


class EngineProcess(_Process):
    """``python -m p2p_runtime.engine`` on a port it picks itself (read from the ready line)."""

    def __init__(self, log: Path, args: list[str]) -> None:
        super().__init__(log)
        self.args = args
        self.url = ""

    def start(self, timeout_s: float = 120.0) -> "EngineProcess":
        self._spawn([sys.executable, "-m", "p2p_runtime.engine", "--port", "0", *self.args])
        match = wait_until(self._ready_line, "engine ready line", timeout_s, self.log)
        self.url = f"http://{match.group(1)}:{match.group(2)}"
        return self

    def _ready_line(self):
        self._check_alive("engine")
        return READY_RE.search(self.log.read_text(errors="replace"))

    def post(self, path: str, body: dict, timeout_s: float = 120.0) -> dict:
        r = httpx.post(f"{self.url}{path}", json=body, timeout=timeout_s)
        assert r.status_code == 200, f"{r.status_code} {r.text}\n{log_tail(self.log)}"
        return r.json()

    def chat(self, content: str, max_tokens: int = 16) -> dict:
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "ignore_eos": True}
        return self.post("/v1/chat/completions", body)

    def metrics(self) -> dict[str, float]:
        """Sum of every sample by name (labels folded), buckets left out."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.endswith("_bucket"):
                    out[s.name] = out.get(s.name, 0.0) + s.value
        return out


class EngineFleet:
    """Starts engines and stops every one of them at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.engines: list[EngineProcess] = []

    def start(self, *args: str, name: str = "engine") -> EngineProcess:
        engine = EngineProcess(self.tmp / f"{name}-{len(self.engines)}.log", list(args))
        self.engines.append(engine)
        return engine.start()

    def stop_all(self) -> None:
        for engine in self.engines:
            engine.stop()


@pytest.fixture(scope="module")
def lmcache_server(tmp_path_factory) -> Iterator[LMCacheServer]:
    server = LMCacheServer(tmp_path_factory.mktemp("lmcache") / "server.log")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> Iterator[EngineFleet]:
    fleet = EngineFleet(tmp_path_factory.mktemp("engines"))
    try:
        yield fleet
    finally:
        fleet.stop_all()
