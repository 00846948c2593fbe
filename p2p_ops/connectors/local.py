"""Run commands on this machine with subprocess (the `local` connection kind)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from p2p_ops import files
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
        """The folder is made private, and the copy replaces whatever is at `remote` (a link included) without
        following it."""
        dest = Path(remote)
        if Path(local).resolve() == dest.resolve():
            return
        files.private_dir(dest.parent)
        files.write_text(dest, files.read_text(local), 0o600 if mode is None else mode)

    def close(self) -> None:
        pass
