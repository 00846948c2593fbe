"""Facts parsed from captured output, one JSON case per file under tests/fixtures/facts/<fact>/ (pyinfra's way).

Each case gives the fact's arguments, the command's output and the parsed value it must give. The command the
fact runs is checked where it matters (quoting, what it reads) in the tests below the cases.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, is_dataclass
from pathlib import Path

import pytest

from p2p_ops.facts.logs import file_copy_fact, log_excerpt_fact, log_grep_fact, log_tail_fact
from p2p_ops.facts.memory import MEMINFO
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.paths import paths_fact
from p2p_ops.facts.pidfile import Watched, pid_states_fact

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "facts"
BUILDERS = {
    "log_excerpt": lambda a: log_excerpt_fact(a["path"], a["lines"]),
    "log_tail": lambda a: log_tail_fact(a["path"], a["lines"]),
    "file_copy": lambda a: file_copy_fact(a["path"], a["cap_bytes"]),
    "pid_states": lambda a: pid_states_fact([Watched(f"/p{i}", f"m{i}", f"/w{i}") for i in range(a["count"])]),
    "paths": lambda a: paths_fact(a["wanted"]),
    "ipv4_interfaces": lambda a: IPV4_INTERFACES,
    "meminfo": lambda a: MEMINFO,
}


def _plain(value):
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return [list(asdict(v).values()) if is_dataclass(v) else _plain(v) for v in value]
    return value


def _cases():
    for path in sorted(CASES.glob("*/*.json")):
        yield pytest.param(path, id=f"{path.parent.name}/{path.stem}")


@pytest.mark.parametrize("path", list(_cases()))
def test_fact_case(path: Path):
    case = json.loads(path.read_text())
    output = case.get("output")
    if output is None:
        output = (path.parent / case["output_file"]).read_text()
    fact = BUILDERS[path.parent.name](case["args"])
    got = _plain(fact.parse(output))
    assert got == case["fact"], f"GOT {json.dumps(got)}\nWANT {json.dumps(case['fact'])}"


def test_every_fact_folder_has_a_builder_and_every_builder_a_case():
    assert {p.name for p in CASES.iterdir() if p.is_dir()} == set(BUILDERS)


def test_log_commands_quote_the_path_and_send_the_bytes_as_they_are():
    odd = "/run/f/it's $(here)/server.log"
    for fact in (log_tail_fact(odd, 5), log_excerpt_fact(odd), log_grep_fact(odd, ["a|b", "it's"], 10),
                 file_copy_fact(odd, 100)):
        script = fact.argv[-1]
        assert shlex.quote(odd) in script and "sed" not in script  # colours are the parser's job (strip_ansi)
    assert "-e 'a|b'" in log_grep_fact("/x", ["a|b"], 3).argv[-1]


def test_pid_states_runs_one_check_per_watched_process_in_order(tmp_path):
    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.sections import read_fact

    (tmp_path / "gone.pid").write_text("999999999\n")
    watched = [Watched(str(tmp_path / "none.pid"), "m", "/w"), Watched(str(tmp_path / "gone.pid"), "m", "/w")]
    states = read_fact(LocalConnector(), pid_states_fact(watched))
    assert [(s.state, s.pid) for s in states] == [("none", None), ("dead", 999999999)]
