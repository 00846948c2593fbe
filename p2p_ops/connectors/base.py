"""The connector contract: run a shell command on a host, copy a file there; results, never surprises.

`Result` is the one result type of the project: what a connector returns, what a local fact runner returns and
what each section of a batched node read (`p2p_ops.facts.sections`) comes back as.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from p2p_ops.errors import CouldNotRun


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


EXIT_NOT_FOUND = 127


@dataclass(frozen=True)
class Result:
    host: str
    command: str
    exit_code: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def output(self) -> str:
        # Tools print their "no devices" verdicts on stderr (ibv_devinfo, rdma); parsers read both, as captured
        # with `2>&1`.
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr

    @property
    def not_found(self) -> bool:
        return self.exit_code == EXIT_NOT_FOUND

    def describe(self) -> str:
        out = tail((self.stdout + "\n" + self.stderr).strip()) or "(no output)"
        return f"on {self.host}: `{self.command}` exited {self.exit_code}\n{out}"


class CommandFailed(CouldNotRun):
    def __init__(self, result: Result):
        super().__init__(result.describe())
        self.result = result


class Connector(Protocol):
    host: str

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        """A bash command line; with check=True, CommandFailed on a non-zero exit."""

    def put(self, local: Path, remote: str, mode: int | None = None) -> None:
        """Creates the parent folders."""

    def close(self) -> None:
        ...
