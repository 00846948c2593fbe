"""What a fact is: a command (or a file read) plus a pure parser, run through an injectable runner.

A `CommandFact` names its command and its parser. `collect(runner)` runs the command and parses the combined
output, so the same parser is tested from captured output (`tests/fixtures/diagnose/`) and used live. Runners:

- `run_local`: subprocess on this host, bounded by a timeout; a missing binary is exit 127, never an exception.
- `RecordedRunner(dir)`: answers from `<dir>/<fact-name>.txt` (and optional `<fact-name>.rc`), which is how a
  captured host snapshot (a fixture tree, or a bundle) is replayed.

Add a fact as a module-level `CommandFact(name, argv, parse)` next to its parser and list it in
`p2p_ops.facts.COMMAND_FACTS`.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar
from collections.abc import Callable, Mapping, Sequence

T = TypeVar("T")

EXIT_NOT_FOUND = 127


@dataclass(frozen=True)
class CommandResult:
    """One finished command: exit code and both streams."""

    rc: int
    stdout: str = ""
    stderr: str = ""

    @property
    def output(self) -> str:
        # Tools print their "no devices" verdicts on stderr (ibv_devinfo, rdma); parsers read both, as captured
        # with `2>&1`.
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr

    @property
    def not_found(self) -> bool:
        return self.rc == EXIT_NOT_FOUND


Runner = Callable[[Sequence[str]], CommandResult]


def run_local(
    argv: Sequence[str], timeout_s: float = 20.0, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run argv on this host; a missing binary gives rc 127 and a timeout rc 124, like a shell would."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
            check=False,
        )
    except FileNotFoundError:
        return CommandResult(EXIT_NOT_FOUND, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: timed out after {timeout_s:g}s")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


class RecordedRunner:
    """Replays recorded outputs: `<dir>/<name>.txt` is the output, `<dir>/<name>.rc` the exit code (default 0).

    A command with no recording behaves like a missing binary (rc 127), which is what an absent tool looks like.
    """

    def __init__(self, directory: Path, names: Mapping[tuple[str, ...], str]):
        self.directory = Path(directory)
        self.names = dict(names)

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        name = self.names.get(tuple(argv))
        path = self.directory / f"{name}.txt"
        if name is None or not path.is_file():
            return CommandResult(EXIT_NOT_FOUND, "", f"{argv[0]}: command not found")
        rc_path = self.directory / f"{name}.rc"
        rc = int(rc_path.read_text().strip()) if rc_path.is_file() else 0
        return CommandResult(rc, path.read_text(errors="replace"), "")


@dataclass(frozen=True)
class CommandFact(Generic[T]):
    """A probe: `argv` is what runs on the host, `parse` turns its combined output into a typed value."""

    name: str
    argv: tuple[str, ...]
    parse: Callable[[str], T]

    def collect(self, runner: Runner = run_local) -> T:
        return self.parse(runner(self.argv).output)

    def collect_raw(self, runner: Runner = run_local) -> tuple[CommandResult, T]:
        result = runner(self.argv)
        return result, self.parse(result.output)


def read_sysfs(path: Path) -> str | None:
    """A sysfs attribute without its trailing newline, or None when absent or unreadable (unused GID slots)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    value = read_sysfs(path)
    try:
        return int(value, 0) if value is not None else None
    except ValueError:
        return None
