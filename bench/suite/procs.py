"""Short-lived helper processes for the benchmarks (an engine, the instant server), always ended by handle."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import requests

from p2p_ops.lifecycle.free_ports import free_port


@contextmanager
def process(cmd: list[str], ready_url: str, log: Path, timeout_s: float = 120.0) -> Iterator[subprocess.Popen]:
    """Start cmd, wait until ready_url answers 200, yield; terminate (then kill) it on the way out."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
            try:
                if requests.get(ready_url, timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ready_url} not ready after {timeout_s:.0f} s; see {log}")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def engine(log_dir: Path, *args: str) -> Iterator[str]:
    """A plain embedded engine (no LMCache) on a free port; yields its base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "p2p_runtime.engine", "--port", str(port), "--served-model-name", "tiny-llm",
           "--log-level", "warning", *args]
    with process(cmd, url + "/v1/models", log_dir / f"engine-{port}.log"):
        yield url
