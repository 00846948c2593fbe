"""Every reporting verb, piped: no line depends on the terminal width, --json is one JSON document, and no
escape codes reach a pipe. On a terminal, NO_COLOR and --no-color drop every style. No fleet is started."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_local_fleet

REPO = Path(__file__).resolve().parents[2]
P2PCTL = [sys.executable, "-m", "p2p_ops.cli"]
FIXTURES = REPO / "tests/fixtures/diagnose"


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run(capsys, monkeypatch):
    """p2pctl in this process with stdout and stderr captured (not terminals, as in a pipe)."""
    from p2p_ops.cli import main

    def _run(args, cwd, columns=300):
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("COLUMNS", str(columns))
        monkeypatch.delenv("NO_COLOR", raising=False)
        capsys.readouterr()
        try:
            rc = main(list(args))
        except SystemExit as exc:  # argparse: --version, usage errors
            rc = exc.code
        out, err = capsys.readouterr()
        return Result(rc, out, err)

    return _run


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    write_local_fleet(d / "fleet.yaml", 2, name="cli")
    res = subprocess.run([*P2PCTL, "render"], cwd=d, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return d


# Verbs whose output is the same from one run to the next on a stopped fleet (rc: expected exit code).
DETERMINISTIC = [
    (["validate"], 0),
    (["render"], 0),
    (["up", "--dry-run"], 0),
    (["up", "--dry-run", "--node", "node-b", "--no-render", "--role", "server"], 0),
    (["status"], 1),
    (["down"], 0),
    (["down", "--node", "node-a", "--role", "server"], 0),
    (["prometheus", "status"], 1),
    (["grafana"], 0),
    (["test"], 2),
    (["diagnose", "--list"], 0),
    (["doctor", "--no-reach"], None),
    (["explain", "--prompt", "hello"], 2),
    (["status", "--cache"], 1),
    (["ucx-trace", str(FIXTURES / "ucx/recorded_tcp_fallback.log")], None),
    (["rdma", "--root", str(FIXTURES / "rdma/roce_no_ipv4_gid")], None),
]


@pytest.mark.parametrize("argv,rc", DETERMINISTIC, ids=[" ".join(a[:3]) for a, _ in DETERMINISTIC])
def test_piped_output_does_not_depend_on_terminal_width(run, fleet_dir, argv, rc):
    narrow, wide = run(argv, fleet_dir, columns=40), run(argv, fleet_dir, columns=400)
    if rc is not None:
        assert narrow.returncode == rc, narrow.stderr
    assert narrow.stdout.strip(), narrow.stderr
    assert narrow.stdout == wide.stdout, "output wrapped at the terminal width"
    assert "\x1b[" not in narrow.stdout + narrow.stderr
    assert "Traceback" not in narrow.stderr


JSON_VERBS = [
    ["init", "--local", "2", "-o", "other.yaml", "--force"],
    ["validate"], ["render"], ["up", "--dry-run"], ["status"], ["down"], ["prometheus", "status"],
    ["test"], ["diagnose", "--list"], ["doctor", "--no-reach"], ["monitor", "--once", "--source", "direct"],
    ["grafana", "-o", "dash.json"], ["bundle", "--no-doctor", "-o", "b.tar.gz"],
    ["ucx-trace", str(FIXTURES / "ucx/recorded_tcp_fallback.log")],
    ["test", "faults", "--quick"],  # a stopped fleet: refused, still one document
    ["make-model", "tiny-model"],
    ["prometheus", "down"],
]


@pytest.mark.parametrize("argv", JSON_VERBS, ids=[" ".join(a[:2]) for a in JSON_VERBS])
def test_json_is_one_document_on_stdout(run, fleet_dir, argv):
    res = run([*argv, "--json"], fleet_dir, columns=40)
    assert res.returncode in (0, 1, 2), res.stderr
    assert "Traceback" not in res.stderr
    json.loads(res.stdout)  # raises on anything else printed there


def _verbs(parser, words=()):
    """(words, parser) of every verb: a parser without subcommands, or a group that runs a handler of its own
    (`p2pctl test` lists the kinds); a group that only holds subcommands (`p2pctl bench`) is not a verb."""
    import argparse

    subs = {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}
    if words and (not subs or parser.get_default("handler")):
        yield " ".join(words), parser
    for name, sub in subs.items():
        yield from _verbs(sub, (*words, name))


def _all_verbs():
    from p2p_ops.cli import build_parser

    return dict(_verbs(build_parser()))


_VERB_NAMES = sorted(_all_verbs())


@pytest.mark.parametrize("verb", _VERB_NAMES)
def test_every_verb_takes_json(verb):
    parser = _all_verbs()[verb]
    flags = {o for a in parser._actions for o in a.option_strings}
    assert "--json" in flags, f"p2pctl {verb} has no --json (house rule: p2p_ops/cli/output.py)"


def test_the_verb_walk_sees_every_verb():
    assert {"init", "status", "test", "test basic", "test faults", "prometheus up", "make-model",
            "bench placement", "calibrate"} <= set(_VERB_NAMES)
    assert "bench" not in _VERB_NAMES and "prometheus" not in _VERB_NAMES


def test_grafana_without_output_prints_the_dashboard(run, fleet_dir):
    board = json.loads(run(["grafana"], fleet_dir).stdout)
    assert board["panels"] and all(p["targets"][0]["expr"] for p in board["panels"])


def test_version_and_exit_codes_in_every_help(fleet_dir):
    res = subprocess.run([*P2PCTL, "--version"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("p2pctl ")
    from p2p_ops.cli import EXIT_CODES_EPILOG, _subcommands, build_parser

    def walk(parser):
        yield parser
        for sub in _subcommands(parser).values():
            yield from walk(sub)

    parsers = list(walk(build_parser()))
    assert len(parsers) > 20
    for parser in parsers:
        assert EXIT_CODES_EPILOG in parser.format_help().replace("\n", " "), parser.prog


def test_test_without_a_kind_lists_the_kinds(run, fleet_dir):
    res = run(["test"], fleet_dir)
    assert res.returncode == 2
    assert all(k in res.stdout for k in ("basic", "stress", "longdoc", "all"))


def test_quiet_silences_progress(run, fleet_dir):
    # Two files: bundle -o refuses to overwrite without --force.
    loud, quiet = run(["bundle", "--no-doctor", "-o", "loud.tar.gz"], fleet_dir), \
        run(["-q", "bundle", "--no-doctor", "-o", "quiet.tar.gz"], fleet_dir)
    assert loud.returncode == quiet.returncode == 0
    assert "·" in loud.stderr and "·" not in quiet.stderr


def _on_terminal(argv, cwd, env_extra=None) -> bytes:
    """Run p2pctl with stdout on a pseudo-terminal; returns what it wrote."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update({"TERM": "xterm-256color", "COLUMNS": "200", **(env_extra or {})})
    env.pop("FORCE_COLOR", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen([*P2PCTL, *argv], cwd=cwd, env=env, stdout=slave, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks)


def test_no_color_drops_every_style_on_a_terminal(fleet_dir):
    assert b"\x1b[" in _on_terminal(["status"], fleet_dir)  # colours and bold by default
    assert b"\x1b[" not in _on_terminal(["status"], fleet_dir, {"NO_COLOR": "1"})
    assert b"\x1b[" not in _on_terminal(["status", "--no-color"], fleet_dir)


# Pieces that sit far apart on one line; a wrapped line splits them.
ONE_LINE = [
    (["validate"], ("ok — fleet 'cli'", "2 instance(s)")),
    (["status"], ("instance", "L1 used/total GiB", "engine health")),
    (["status"], ("coordinator http://", "not healthy", "/instances")),
    (["status"], ("node-b-0", "node-b", "http://127.0.0.1:", "none")),
    (["down"], ("coordinator/coordinator", "none")),
    (["test"], ("longdoc", "documents warmed on one node, queried from another")),
]


@pytest.mark.parametrize("argv,pieces", ONE_LINE, ids=[" ".join(a) + str(i) for i, (a, _) in enumerate(ONE_LINE)])
def test_long_lines_stay_whole_when_piped(run, fleet_dir, argv, pieces):
    out = run(argv, fleet_dir, columns=40).stdout
    assert any(all(p in line for p in pieces) for line in out.splitlines()), out


def test_piped_tables_are_plain_columns(run, fleet_dir):
    out = run(["status"], fleet_dir).stdout
    assert not set("│┃━─┏┡└") & set(out), out
    header = next(line for line in out.splitlines() if line.startswith("instance"))
    assert header.split()[:3] == ["instance", "node", "server"]
