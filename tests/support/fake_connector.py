"""A scripted fake connector: unit tests drive the operations (launch, the doctor's gather, bundle, probe) through
it instead of patching their parts or reaching a node.

In the spirit of Invoke's `MockContext` and Fabric's `MockRemote`: a test declares the commands a node will be
asked to run and what each answers; any other command fails the test, naming it and the declared patterns, and
a declaration that never ran fails it too. The `fakes` fixture (tests/conftest.py) checks both on teardown, so a
command the code under test swallowed (it turns a node's exception into that node's result) still fails::

    def test_up_reaches_every_node(fakes):
        fleet = fakes.fleet(2, lambda ctx, node: [fact(NODE_ANSWERS)])
        ...

A declaration (`Expect`) matches a command by substring or compiled regex (`re.search`) and answers a `Result`,
stdout text, an exit code, an exception to raise (a connection error) or a callable of the command returning
one of those; `repeat=True` answers every matching command, otherwise it answers once. Declarations are tried in
order, so an exact one declared before a catch-all wins. The builders below match the exact command an act or a
fact runs, built by the product code itself: `fact`, `node_read` (a batched `read_node`, framed with
`p2p_ops.facts.sections`), `pid_states`, `start`, `stop`, `file_copy`, plus `like` (any path) and
`unreachable`. Readiness is HTTP, not a command: `serve_ready` answers the units' probes from real loopback
servers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union
from urllib.parse import urlsplit

from p2p_ops.connectors.base import CommandFailed, Connector, Result
from p2p_ops.connectors.ssh import SSHConnectError
from p2p_ops.facts import sections
from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import _MISSING as NO_SUCH_FILE  # what its command prints for no file
from p2p_ops.facts.logs import file_copy_fact
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.model import Node
from p2p_ops.spec.starter import dump_yaml, local_fleet
from p2p_ops.spec.units import Proc, Unit

Answer = Union[Result, str, int, BaseException, Callable[[str], Any]]
Pattern = Union[str, "re.Pattern[str]"]
SHOWN = 300  # characters of an undeclared command an error shows


@dataclass
class Expect:
    """One declared command: what matches it, what it answers, and how often it ran."""

    pattern: Pattern
    answer: Answer = ""
    repeat: bool = False
    label: str = ""
    runs: int = 0

    def matches(self, command: str) -> bool:
        if isinstance(self.pattern, str):
            return self.pattern in command
        return self.pattern.search(command) is not None

    @property
    def available(self) -> bool:
        return self.repeat or self.runs == 0

    def describe(self) -> str:
        if self.label:
            return self.label
        text = self.pattern if isinstance(self.pattern, str) else f"re {self.pattern.pattern}"
        return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class Call:
    """One command a fake ran (or refused), in the order they came."""

    host: str
    command: str
    label: str            # the declaration that answered it; "" when none did
    timeout: float
    check: bool


@dataclass(frozen=True)
class Put:
    local: Path
    remote: str
    mode: Optional[int]
    data: bytes


class UndeclaredCommand(AssertionError):
    def __init__(self, host: str, command: str, script: Sequence[Expect]):
        shown = command if len(command) <= SHOWN else command[:SHOWN] + f"... ({len(command)} characters)"
        declared = "\n".join(f"  - {e.describe()}{'' if e.available else ' (used)'}" for e in script) or "  (none)"
        super().__init__(f"{host}: undeclared command:\n  {shown}\ndeclared:\n{declared}")
        self.host, self.command = host, command


class FakeConnector:
    """A `Connector` that answers only the commands its script declares (see the module docstring)."""

    def __init__(self, host: str, script: Sequence[Expect] = (), journal: Optional[list[Call]] = None):
        self.host = host
        self.script: list[Expect] = list(script)
        self.calls: list[Call] = []
        self.undeclared: list[str] = []
        self.puts: list[Put] = []
        self.closed = False
        # One journal may be shared by the fakes of a fleet: the order of commands across nodes.
        self.journal: list[Call] = journal if journal is not None else []
        self._lock = threading.Lock()

    def expect(self, *expects: Expect) -> FakeConnector:
        with self._lock:
            self.script.extend(expects)
        return self

    @property
    def commands(self) -> list[str]:
        return [c.command for c in self.calls]

    def ran(self, label: str) -> int:
        """How many commands the declaration labelled `label` answered."""
        return sum(c.label == label for c in self.calls)

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        with self._lock:
            exp = next((e for e in self.script if e.available and e.matches(command)), None)
            call = Call(self.host, command, exp.describe() if exp else "", timeout, check)
            self.calls.append(call)
            self.journal.append(call)
            if exp is None:
                self.undeclared.append(command)
                raise UndeclaredCommand(self.host, command, self.script)
            exp.runs += 1
        result = self._result(exp.answer, command)  # outside the lock: an answer may take its time
        if check and not result.ok:
            raise CommandFailed(result)
        return result

    def _result(self, answer: Answer, command: str) -> Result:
        if callable(answer) and not isinstance(answer, BaseException):
            answer = answer(command)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Result):
            return dataclasses.replace(answer, host=self.host, command=command)
        if isinstance(answer, bool) or not isinstance(answer, (int, str)):
            raise TypeError(f"a fake's answer is a Result, str, int or exception, not {answer!r}")
        if isinstance(answer, int):
            return Result(self.host, command, answer)
        return Result(self.host, command, 0, answer)

    def put(self, local: Path, remote: str, mode: Optional[int] = None) -> None:
        with self._lock:
            self.puts.append(Put(Path(local), remote, mode, Path(local).read_bytes()))

    def close(self) -> None:
        self.closed = True

    def unused(self) -> list[Expect]:
        return [e for e in self.script if e.runs == 0]

    def assert_all_used(self) -> None:
        unused = self.unused()
        if unused:
            raise AssertionError(f"{self.host}: declared command(s) never ran:\n"
                                 + "\n".join(f"  - {e.describe()}" for e in unused))

    def verify(self) -> None:
        """No command went undeclared (also one the code under test caught) and every declaration ran."""
        if self.undeclared:
            raise UndeclaredCommand(self.host, self.undeclared[0], self.script)
        self.assert_all_used()


# ---- declarations ---------------------------------------------------------------------------------------

def expect(pattern: Pattern, answer: Answer = "", repeat: bool = False, label: str = "") -> Expect:
    return Expect(pattern, answer, repeat, label)


def exactly(command: str) -> re.Pattern[str]:
    """A pattern that matches this command and nothing longer (a batched read contains every fact's command)."""
    return re.compile(r"\A" + re.escape(command) + r"\Z")


class _Captured(Exception):
    def __init__(self, command: str):
        super().__init__(command)
        self.command = command


class _Recorder:
    host = "recorder"

    def run(self, command: str, timeout: float = 60, check: bool = False) -> Result:
        raise _Captured(command)

    def put(self, local: Path, remote: str, mode: Optional[int] = None) -> None:
        raise AssertionError("a command builder put a file")

    def close(self) -> None:
        pass


def command_of(act: Callable[[Connector], object]) -> str:
    """The first command `act(conn)` runs: the product code builds it, the test does not copy it."""
    try:
        act(_Recorder())
    except _Captured as c:
        return c.command
    raise AssertionError("the act ran no command")


def act(run: Callable[[Connector], object], answer: Answer = "", repeat: bool = False, label: str = "") -> Expect:
    """The exact command that `run(conn)` sends, e.g. `act(lambda c: bootstrap_node(ctx, node), ...)`."""
    return Expect(exactly(command_of(run)), answer, repeat, label)


def fact(f: CommandFact, output: str = "", exit_code: int = 0, repeat: bool = False,
         answer: Optional[Answer] = None) -> Expect:
    """A fact read alone (`sections.read_fact`): its exact command, answering `output` (or `answer`)."""
    return Expect(exactly(f.shell), Result("", f.shell, exit_code, output) if answer is None else answer, repeat,
                  f"fact {f.name}")


Section = Union[str, tuple[int, str]]


def framed(facts: Mapping[str, CommandFact], outputs: Mapping[str, Section]) -> str:
    """What `sections.script(facts)` prints when each label's command prints `outputs[label]` (text, or
    (exit code, text)). A label without an output is left out, which reads as cut short, as on a dropped
    connection."""
    unknown = [label for label in outputs if label not in facts]
    if unknown:
        raise ValueError(f"no fact labelled {', '.join(map(repr, unknown))} in this read; its labels are "
                         + ", ".join(map(repr, facts)))
    parts = []
    for label in facts:
        if label in outputs:
            out = outputs[label]
            rc, text = out if isinstance(out, tuple) else (0, out)
            body = text.rstrip("\n")
            parts.append(f"\n{sections.SECTION} {label}\n{body}\n{sections.RC} {rc}\n")
    return "".join(parts)


def node_read(facts: Mapping[str, CommandFact], outputs: Mapping[str, Section], repeat: bool = False) -> Expect:
    """A batched `sections.read_node(conn, facts)`, answered per label (see `framed`)."""
    return Expect(exactly(sections.script(facts)), framed(facts, outputs), repeat,
                  "node read of " + ", ".join(facts))


PidAnswer = Union[int, str, None]


def pid_lines(answers: Sequence[PidAnswer]) -> str:
    """The `facts.pidfile.pid_states_fact` answer: a pid is "running <pid>", None "none -", a string as given
    ("dead 12", "stale 7")."""
    def line(a: PidAnswer) -> str:
        return "none -" if a is None else f"running {a}" if isinstance(a, int) else a

    return "".join(line(a) + "\n" for a in answers)


def pid_states(watched: Sequence[Proc], answers: Optional[Mapping[str, PidAnswer]] = None,
               repeat: bool = False) -> Expect:
    """`procs.states(conn, watched)`: `answers` by process name (a pid, None or a line); others: no pidfile."""
    answers = dict(answers or {})
    unknown = [n for n in answers if n not in {p.name for p in watched}]
    if unknown:
        raise ValueError(f"{unknown} not among the watched processes {[p.name for p in watched]}")
    lines = pid_lines([answers.get(p.name) for p in watched])
    return act(lambda c: procs.states(c, list(watched)), lines, repeat,
               "pid states of " + ", ".join(p.name for p in watched))


def start(proc: Proc, pid: int = 4242, kept: bool = False, answer: Optional[Answer] = None) -> Expect:
    """`procs.start(conn, proc)`: started (or, with kept, found running) as `pid`."""
    word = "running" if kept else "started"
    return act(lambda c: procs.start(c, proc), f"{word} {pid}\n" if answer is None else answer,
               label=f"start {proc.name}")


def stop(proc: Proc, outcome: str = "stopped") -> Expect:
    """`procs.stop(conn, proc)` answering stopped | killed | dead | stale | none."""
    return act(lambda c: procs.stop(c, proc), outcome + "\n", label=f"stop {proc.name}")


def file_copy(path: str, text: str, cap: int, repeat: bool = False, within: str | None = None) -> Expect:
    """`facts.logs.file_copy_fact(path, cap, within)` of a file holding `text` (the command prints its size,
    then it)."""
    f = file_copy_fact(path, cap, within)
    data = text.encode()
    return Expect(exactly(f.shell), f"{len(data)}\n{data[-cap:].decode(errors='ignore')}", repeat,
                  f"copy of {path}")


ANY = "@@fake-any-path@@"


def like(build: Callable[[str], CommandFact], answer: Answer, label: str) -> Expect:
    """Every command `build(path).shell` gives for any path (repeats), e.g. every other file the bundle copies:
    `like(lambda p: file_copy_fact(p, cap), missing_file(), "other files: none")`."""
    shell = build(ANY).shell
    assert ANY in shell, "the builder does not put its path in the command"
    return Expect(re.compile(r"\A" + re.escape(shell).replace(re.escape(ANY), ".+?") + r"\Z"), answer, True,
                  label)


def missing_file() -> Result:
    """What `file_copy_fact` prints for a path that is no file."""
    return Result("", "", 3, NO_SUCH_FILE + "\n")


def connect_error(host: str, target: str = "") -> SSHConnectError:
    """What the SSH connector raises for a node that refuses connections (target: user@address:port)."""
    return SSHConnectError(host, target or f"root@{host}:22", "unreachable", "connection refused",
                           "start sshd there")


def unreachable(host: str, target: str = "") -> Expect:
    """A node whose every command fails to connect (raises `SSHConnectError`, as the SSH connector does)."""
    return Expect(re.compile(r"(?s).*"), lambda _: connect_error(host, target), True,
                  f"anything ({host} unreachable)")


# ---- a fleet of fakes --------------------------------------------------------------------------------------

Scripts = Union[Mapping[str, Sequence[Expect]], Callable[[FleetContext, Node], Sequence[Expect]], None]


@dataclass
class FakeFleet:
    """A loaded starter fleet whose every node (and this machine, "") is reached through a fake."""

    ctx: FleetContext
    fakes: dict[str, FakeConnector]
    journal: list[Call] = field(default_factory=list)

    def __getitem__(self, node: str) -> FakeConnector:
        return self.fakes[node]

    def connect(self, node: Optional[Node]) -> FakeConnector:
        name = "" if node is None else node.name
        if name not in self.fakes:  # this machine, unless a test declared something for it
            self.fakes[name] = FakeConnector(name or "local", journal=self.journal)
        return self.fakes[name]

    def labels(self) -> list[tuple[str, str]]:
        """(host, declaration) of every command the fleet's fakes ran, in order."""
        return [(c.host, c.label) for c in self.journal]

    def verify(self) -> None:
        for fake in self.fakes.values():
            fake.verify()


def fake_fleet(tmp_path: Path, n: int = 2, script_per_node: Scripts = None, name: str = "fake",
               edit: Optional[Callable[[dict], None]] = None) -> FakeFleet:
    """Write a local starter fleet of n nodes (free loopback ports) under tmp_path and load it with `connect=`
    the fakes. `script_per_node`: {node name: declarations}, or a function (ctx, node) -> declarations (most
    declarations need the loaded context: its process paths). `edit` changes the spec data before it is written."""
    from tests.conftest import free_base

    data = local_fleet(n, name=name, base=free_base(n))
    if edit is not None:
        edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(dump_yaml(data))
    journal: list[Call] = []
    fleet = FakeFleet(None, {}, journal)  # type: ignore[arg-type]
    fleet.ctx = FleetContext.load(path, connect=fleet.connect)
    for node in fleet.ctx.fleet.nodes:
        declared = script_per_node(fleet.ctx, node) if callable(script_per_node) else \
            (script_per_node or {}).get(node.name, ())
        fleet.fakes[node.name] = FakeConnector(node.name, declared, journal)
    return fleet


class Fakes:
    """What the `fakes` fixture hands a test: fakes and fake fleets, every one verified on teardown."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.made: list[Union[FakeConnector, FakeFleet]] = []

    def connector(self, host: str, script: Sequence[Expect] = ()) -> FakeConnector:
        fake = FakeConnector(host, script)
        self.made.append(fake)
        return fake

    def fleet(self, n: int = 2, script_per_node: Scripts = None, name: str = "fake",
              edit: Optional[Callable[[dict], None]] = None) -> FakeFleet:
        fleet = fake_fleet(self.tmp_path, n, script_per_node, name, edit)
        self.made.append(fleet)
        return fleet

    def verify(self) -> None:
        for made in self.made:
            if isinstance(made, FakeFleet):
                made.ctx.close()
            made.verify()


def cli_through(monkeypatch, fleet: FakeFleet) -> None:
    """Make every `FleetContext.load` (the CLI's, in-process) reach nodes through this fleet's fakes."""
    real = FleetContext.load.__func__  # type: ignore[attr-defined]

    def load(cls, fleet_file, run_dir=None, connect=None):
        return real(cls, fleet_file, run_dir, connect=fleet.connect)

    monkeypatch.setattr(FleetContext, "load", classmethod(load))


# ---- readiness: real HTTP on loopback ---------------------------------------------------------------------

# What each unit's readiness probe (`spec.units`) wants: the coordinator's /healthz, a server's /status, an
# embedded engine's or the router's /health.
READY: dict[str, Any] = {"/healthz": {"status": "healthy"}, "/status": {"is_healthy": True}, "/health": {}}


def _handler(routes: Mapping[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = urlsplit(self.path).path
            body = json.dumps(routes[path]).encode() if path in routes else b'{"error": "not found"}'
            self.send_response(200 if path in routes else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve(url: str, routes: Mapping[str, Any]) -> Iterator[ThreadingHTTPServer]:
    """A real HTTP server at `url` (a loopback host and port) answering `routes` (path -> JSON body), 404 else."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.hostname.startswith("127."), f"{url}: loopback only"
    server = ThreadingHTTPServer((parts.hostname, parts.port or 80), _handler(routes))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def serve_ready(units: Sequence[Unit], routes: Mapping[str, Any] = READY) -> Iterator[None]:
    """Each unit's readiness probe answered by a real loopback server at the unit's URL."""
    with ExitStack() as stack:
        for unit in units:
            stack.enter_context(serve(unit.url, routes))
        yield
