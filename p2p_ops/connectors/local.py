"""Run commands on this machine with subprocess (the `local` connection kind)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from p2p_ops.connectors.base import CommandFailed, Result


class LocalConnector:
    def __init__(self, host: str = "localhost"):
        self.host = host

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        try:
            proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
            result = Result(self.host, command, proc.returncode, proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            result = Result(self.host, command, 124, out, f"timed out after {timeout:.0f} s")
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def put(self, local: Path, remote: str, mode: int | None = None) -> None:
        dest = Path(remote)
        if Path(local).resolve() == dest.resolve():
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dest)
        if mode is not None:
            dest.chmod(mode)

    def close(self) -> None:
        pass
