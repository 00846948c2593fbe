"""What a fact is: a command (or a file read) plus a pure parser, run through an injectable runner, so the same
parser is tested from captured output (`tests/fixtures/diagnose/`) and used live. Every runner returns the
connectors' `Result`: `run_local` (this host), `RecordedRunner` (a captured snapshot or bundle, replayed) or a
node's connector (`facts.sections.read_node` runs many facts in one round trip).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from p2p_ops import files
from p2p_ops.connectors.base import EXIT_NOT_FOUND, Result

T = TypeVar("T")

LOCALHOST = "localhost"
# A recorded tool output (`ibv_devinfo -v` of a big host is a few hundred KiB) and a sysfs attribute (a page).
RECORDING_CAP = 16 << 20
SYSFS_CAP = 64 << 10
# What a probe prints when the tool it would ask is not there (nvidia-smi on a CPU node): "not checked".
ABSENT = "@@absent"


Runner = Callable[[Sequence[str]], Result]


def run_local(argv: Sequence[str], timeout_s: float = 20.0) -> Result:
    """A missing binary gives exit code 127 and a timeout 124, like a shell would."""
    command = shlex.join(argv)
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        return Result(LOCALHOST, command, EXIT_NOT_FOUND, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return Result(LOCALHOST, command, 124, "", f"{argv[0]}: timed out after {timeout_s:g}s")
    return Result(LOCALHOST, command, proc.returncode, proc.stdout, proc.stderr)


class RecordedRunner:
    """`<dir>/<name>.txt` is the output, `<dir>/<name>.rc` the exit code (default 0); a command with no recording
    behaves like a missing binary (rc 127), which is what an absent tool looks like."""

    def __init__(self, directory: Path, names: Mapping[tuple[str, ...], str]):
        self.directory = Path(directory)
        self.names = dict(names)

    def __call__(self, argv: Sequence[str]) -> Result:
        name = self.names.get(tuple(argv))
        path = self.directory / f"{name}.txt"
        where = f"recording {self.directory}"
        if name is None or not (path.exists() or path.is_symlink()):
            return Result(where, shlex.join(argv), EXIT_NOT_FOUND, "", f"{argv[0]}: command not found")
        rc_path = self.directory / f"{name}.rc"
        rc_text = files.read_text(rc_path, 64).strip() if rc_path.exists() else "0"
        rc = int(rc_text) if rc_text.lstrip("-").isdecimal() else 1
        return Result(where, shlex.join(argv), rc, files.read_text(path, RECORDING_CAP), "")


@dataclass(frozen=True)
class CommandFact(Generic[T]):
    name: str
    argv: tuple[str, ...]
    parse: Callable[[str], T]

    def collect(self, runner: Runner = run_local) -> T:
        return self.parse(runner(self.argv).output)

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)


def read_sysfs(path: Path) -> str | None:
    """A sysfs attribute without its trailing newline, or None when absent or unreadable (unused GID slots).
    A FIFO or device standing in for one is refused (`files.Refused`), never read or waited on."""
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return files.read_text(path, SYSFS_CAP).strip()
    except files.Refused as exc:
        if exc.reason.startswith("is ") and "regular file" in exc.reason:
            raise
        return None


def entries(directory: Path) -> list[Path]:
    """A directory's entries by name; none when it is absent (no RDMA stack, not mapped into a container)."""
    return sorted(directory.iterdir()) if directory.is_dir() else []


def read_int(path: Path) -> int | None:
    value = read_sysfs(path)
    try:
        return None if value is None else int(value, 0)
    except ValueError:
        return None
