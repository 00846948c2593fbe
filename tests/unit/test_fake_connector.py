"""The scripted fake connector (tests/support/fake_connector.py) itself: it answers what is declared, and fails
a test on an undeclared command and on a declaration that never ran."""

from __future__ import annotations

import re

import pytest

from p2p_ops.connectors.base import CommandFailed, Result
from p2p_ops.connectors.ssh import SSHConnectError
from p2p_ops.diagnose import bundle
from p2p_ops.facts.listeners import LISTENERS, SESSIONS, Listener
from p2p_ops.facts.logs import file_copy_fact
from p2p_ops.facts.paths import NODE_ANSWERS
from p2p_ops.facts.sections import read_fact, read_node
from p2p_ops.lifecycle import procs
from tests.support.fake_connector import (
    FakeConnector,
    Fakes,
    UndeclaredCommand,
    command_of,
    expect,
    fact,
    file_copy,
    framed,
    like,
    missing_file,
    node_read,
    pid_lines,
    pid_states,
    serve_ready,
    start,
    stop,
    unreachable,
)


def test_a_declared_substring_or_regex_is_answered_once():
    fake = FakeConnector("n", [expect("hostname", "n1\n"), expect(re.compile(r"^uname -r$"), "6.8\n")])
    assert fake.run("hostname").stdout == "n1\n" and fake.run("uname -r").stdout == "6.8\n"
    with pytest.raises(UndeclaredCommand):
        fake.run("hostname")  # answered once: a second run was not declared
    assert fake.commands == ["hostname", "uname -r", "hostname"]

def test_repeat_answers_every_matching_command():
    fake = FakeConnector("n", [expect("ss ", "LISTEN", repeat=True)])
    assert [fake.run("ss -tln").stdout for _ in range(3)] == ["LISTEN"] * 3
    fake.verify()

def test_declarations_are_tried_in_order():
    fake = FakeConnector("n", [expect("cat /a", "exact"), expect("cat ", "any", repeat=True)])
    assert [fake.run(c).stdout for c in ("cat /a", "cat /a", "cat /b")] == ["exact", "any", "any"]

def test_answers_are_results_exit_codes_exceptions_or_callables():
    fake = FakeConnector("n", [
        expect("a", Result("elsewhere", "x", 2, "out", "err")), expect("b", 127),
        expect("c", SSHConnectError("n", "root@n:22", "unreachable", "refused", "start sshd")),
        expect("d", lambda cmd: f"you said {cmd}")])
    a = fake.run("a")
    assert (a.host, a.command, a.exit_code, a.stdout, a.stderr) == ("n", "a", 2, "out", "err")
    assert fake.run("b").not_found
    with pytest.raises(SSHConnectError, match="unreachable"):
        fake.run("c")
    assert fake.run("d").stdout == "you said d"

def test_check_raises_command_failed_on_a_failing_answer():
    fake = FakeConnector("n", [expect("false", 1, repeat=True)])
    assert fake.run("false").exit_code == 1
    with pytest.raises(CommandFailed, match="exited 1"):
        fake.run("false", check=True)

def test_an_undeclared_command_fails_naming_it_and_the_declared_patterns():
    fake = FakeConnector("node-a", [expect("hostname", label="the host name"), expect(re.compile("^ss"))])
    long = "rm -rf /srv/run " + "x" * 400
    with pytest.raises(UndeclaredCommand) as err:
        fake.run(long)
    text = str(err.value)
    assert text.startswith("node-a: undeclared command:") and long[:300] in text and long not in text
    assert "- the host name" in text and "- re ^ss" in text

def test_an_undeclared_command_fails_verify_even_when_the_code_caught_it():
    fake = FakeConnector("node-a")
    try:
        fake.run("reboot")
    except Exception:  # noqa: BLE001 - what an operation does with one node's failure
        pass
    with pytest.raises(UndeclaredCommand, match="reboot"):
        fake.verify()

def test_assert_all_used_names_declarations_that_never_ran():
    fake = FakeConnector("node-b", [expect("hostname"), fact(NODE_ANSWERS)])
    fake.run("hostname")
    with pytest.raises(AssertionError, match=r"node-b: declared command\(s\) never ran:\n  - fact node_answers"):
        fake.assert_all_used()
    fake.run("true")
    fake.assert_all_used()

def test_an_unused_declaration_fails_the_fixtures_teardown_check(tmp_path):
    made = Fakes(tmp_path)
    made.connector("node-c", [expect("hostname")])
    with pytest.raises(AssertionError, match=r"(?s)node-c: declared command.*hostname"):
        made.verify()

def test_put_records_each_file_with_its_bytes_and_mode(tmp_path):
    src = tmp_path / "env.sh"
    src.write_text("export A=1\n")
    fake = FakeConnector("n")
    fake.put(src, "/srv/run/env.sh", mode=0o600)
    [p] = fake.puts
    assert (p.remote, p.mode, p.data) == ("/srv/run/env.sh", 0o600, b"export A=1\n")


def test_a_fact_matches_its_command_alone_not_a_batch_holding_it():
    fake = FakeConnector("n", [fact(SESSIONS, "1 1\n7 1\n")])
    assert read_fact(fake, SESSIONS) == {1: 1, 7: 1}
    with pytest.raises(UndeclaredCommand):
        read_node(fake, {"sessions": SESSIONS})

def test_a_node_read_answers_each_label_through_the_real_section_parser():
    batch = {"listeners": LISTENERS, "sessions": SESSIONS}
    ss = 'LISTEN 0 128 127.0.0.1:8081 0.0.0.0:* users:(("lmcache",pid=41,fd=3))'
    fake = FakeConnector("n", [node_read(batch, {"listeners": ss, "sessions": (1, "ps: failed")})])
    read = read_node(fake, batch)
    assert LISTENERS.parse(read["listeners"].output) == [Listener("127.0.0.1", 8081, "lmcache", 41)]
    assert (read["sessions"].exit_code, read["sessions"].output) == (1, "ps: failed")

def test_framed_leaves_out_unanswered_labels_and_refuses_unknown_ones():
    batch = {"listeners": LISTENERS, "sessions": SESSIONS}
    read = read_node(FakeConnector("n", [node_read(batch, {"sessions": "1 1"})]), batch)
    assert read["listeners"].exit_code == -1 and read["sessions"].ok
    with pytest.raises(ValueError, match="no fact labelled 'listner'.*'listeners', 'sessions'"):
        framed(batch, {"listner": ""})

def test_pid_states_answer_procs_states(tmp_path):
    ps = [procs.Proc(f"n-{i}/server", str(tmp_path), f"{tmp_path}/w{i}.sh", f"{tmp_path}/{i}.log",
                     f"{tmp_path}/{i}.pid", f"--port {i} ") for i in range(3)]
    assert pid_lines([12, None, "dead 9"]) == "running 12\nnone -\ndead 9\n"
    fake = FakeConnector("n", [pid_states(ps, {"n-0/server": 12, "n-2/server": "stale 5"})])
    got = [(s.name, s.state, s.pid) for s in procs.states(fake, ps)]
    assert got == [("n-0/server", "running", 12), ("n-1/server", "none", None), ("n-2/server", "stale", 5)]
    with pytest.raises(ValueError, match="not among the watched"):
        pid_states(ps, {"other/engine": 1})

def test_start_and_stop_answer_the_acts(tmp_path):
    proc = procs.Proc("x/server", str(tmp_path), f"{tmp_path}/w.sh", f"{tmp_path}/x.log", f"{tmp_path}/x.pid",
                      "--port 1 ")
    other = procs.Proc("y/server", str(tmp_path), f"{tmp_path}/v.sh", f"{tmp_path}/y.log", f"{tmp_path}/y.pid",
                       "--port 2 ")
    fake = FakeConnector("n", [start(proc, 77), start(other, 5, kept=True), stop(proc, "killed")])
    assert procs.start(fake, proc) == procs.ProcState("x/server", "running", 77)
    assert procs.start(fake, other).kept
    assert procs.stop(fake, proc) == "killed"
    with pytest.raises(UndeclaredCommand):
        procs.stop(fake, other)
    assert [c.label for c in fake.calls] == ["start x/server", "start y/server", "stop x/server", ""]

def test_file_copy_and_like_answer_the_bundles_file_reads():
    cap = bundle.LOG_CAP_BYTES
    fake = FakeConnector("n", [file_copy("/r/server.log", "\x1b[32mcoloured\x1b[0m\nline 2\n", cap),
                               like(lambda p: file_copy_fact(p, cap), missing_file(), "other files: none")])
    assert bundle.read_remote(fake, "/r/server.log") == ("coloured\nline 2\n", 25, "")
    assert bundle.read_remote(fake, "/r/engine.log") == (None, 0, "no such file")
    assert bundle.read_remote(fake, "/r/odd name'$(x).log")[2] == "no such file"
    with pytest.raises(UndeclaredCommand):
        fake.run("cat /r/server.log")

def test_unreachable_fails_every_command_with_a_connect_error():
    fake = FakeConnector("node-b", [unreachable("node-b")])
    for cmd in ("true", "multi\nline"):
        with pytest.raises(SSHConnectError, match=r"node-b \(root@node-b:22\): unreachable"):
            fake.run(cmd)

def test_command_of_needs_an_act_that_runs_something():
    assert command_of(lambda c: c.run("echo hi")) == "echo hi"
    with pytest.raises(AssertionError, match="ran no command"):
        command_of(lambda c: None)


def test_a_fake_fleet_reaches_each_node_through_its_fake_with_one_journal(fakes):
    fleet = fakes.fleet(2, lambda ctx, node: [expect("hostname", node.name)])
    ctx = fleet.ctx
    assert [ctx.conn(n) for n in ctx.fleet.nodes] == [fleet["node-a"], fleet["node-b"]]
    assert ctx.for_each_node(lambda n: ctx.conn(n).run("hostname").stdout) == {"node-a": "node-a",
                                                                              "node-b": "node-b"}
    assert sorted(fleet.labels()) == [("node-a", "hostname"), ("node-b", "hostname")]

def test_a_fake_fleet_fails_verify_on_a_command_a_node_was_not_declared(tmp_path):
    made = Fakes(tmp_path)
    fleet = made.fleet(2)
    results = fleet.ctx.for_each_node(lambda n: fleet.ctx.conn(n).run("hostname"))
    assert all(isinstance(r, UndeclaredCommand) for r in results.values())  # swallowed per node...
    with pytest.raises(UndeclaredCommand, match="node-a: undeclared command:\n  hostname"):
        made.verify()  # ...and still failing the test

def test_serve_ready_answers_readiness_over_real_loopback_http(fakes):
    ctx = fakes.fleet(2).ctx
    units = [ctx.unit("coordinator"), ctx.unit("server", "node-a-0"), ctx.unit("engine", "node-b-0")]
    assert not any(u.ready() for u in units)
    with serve_ready(units):
        assert all(u.ready() for u in units)
        assert not ctx.unit("server", "node-b-0").ready()
    assert not any(u.ready() for u in units)
