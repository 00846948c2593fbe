"""Facts parsed from captured output, one JSON case per file under tests/fixtures/facts/<fact>/ (pyinfra's way).

Each case gives the fact's arguments, the command's output and the parsed value it must give. The command the
fact runs is checked where it matters (quoting, what it reads) in the tests below the cases.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, is_dataclass
from pathlib import Path

import pytest

from p2p_ops.facts.logs import file_copy_fact, log_excerpt_fact, log_grep_fact, log_tail_fact, recent_grep_fact
from p2p_ops.facts.memory import MEMINFO
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.paths import paths_fact
from p2p_ops.facts.pidfile import Watched, pid_states_fact
from p2p_ops.facts.proc_usage import threads_fact, usage_fact
from p2p_ops.facts.rail_counters import RAIL_COUNTERS

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "facts"
BUILDERS = {
    "log_excerpt": lambda a: log_excerpt_fact(a["path"], a["lines"]),
    "log_tail": lambda a: log_tail_fact(a["path"], a["lines"]),
    "file_copy": lambda a: file_copy_fact(a["path"], a["cap_bytes"]),
    "pid_states": lambda a: pid_states_fact([Watched(f"/p{i}", f"m{i}", f"/w{i}") for i in range(a["count"])]),
    "paths": lambda a: paths_fact(a["wanted"]),
    "ipv4_interfaces": lambda a: IPV4_INTERFACES,
    "proc_usage": lambda a: usage_fact(a["sessions"]),
    "proc_threads": lambda a: threads_fact(a["pid"]),
    "meminfo": lambda a: MEMINFO,
    "rail_counters": lambda a: RAIL_COUNTERS,
}


def _plain(value):
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
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
        # colours are the parser's job (strip_ansi), not a sed in the command
        assert shlex.quote(odd) in script and not re.search(r"\bsed\b", script)
    assert "-e 'a|b'" in log_grep_fact("/x", ["a|b"], 3).argv[-1]


def test_pid_states_runs_one_check_per_watched_process_in_order(tmp_path):
    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.sections import read_fact

    (tmp_path / "gone.pid").write_text("999999999\n")
    watched = [Watched(str(tmp_path / "none.pid"), "m", "/w"), Watched(str(tmp_path / "gone.pid"), "m", "/w")]
    states = read_fact(LocalConnector(), pid_states_fact(watched))
    assert [(s.state, s.pid) for s in states] == [("none", None), ("dead", 999999999)]


def test_log_readers_refuse_links_fifos_and_folders_out_of_bounds(tmp_path):
    """The commands themselves, run here: a link, a FIFO and a file outside `within` are refused, never read
    (and the FIFO never blocks)."""
    import os

    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.sections import read_fact

    secret = tmp_path / "secret"
    secret.write_text("SECRET\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "link.log").symlink_to(secret)
    os.mkfifo(run / "fifo.log")
    (run / "ok.log").write_text("line 1\nERROR boom\nline 3\n")
    conn = LocalConnector()
    for name, why in (("link.log", "symbolic link"), ("fifo.log", "not a regular file")):
        path = str(run / name)
        for fact in (log_tail_fact(path, 5), log_grep_fact(path, ["S"], 5), recent_grep_fact(path, ["S"], 100, 5)):
            [line] = read_fact(conn, fact, timeout=20)
            assert why in line and "SECRET" not in line
        assert why in read_fact(conn, log_excerpt_fact(path), timeout=20)
        copy = read_fact(conn, file_copy_fact(path, 100), timeout=20)
        assert copy.exists and why in copy.refused and not copy.text
    outside = read_fact(conn, file_copy_fact(str(secret), 100, within=str(run)), timeout=20)
    assert "outside" in outside.refused and "SECRET" not in outside.text
    ok = read_fact(conn, file_copy_fact(str(run / "ok.log"), 12, within=str(run)), timeout=20)
    assert ok.size == 25 and ok.text == "boom\nline 3\n" and not ok.refused
    assert read_fact(conn, log_tail_fact(str(run / "ok.log"), 2), timeout=20) == ["ERROR boom", "line 3"]
    assert read_fact(conn, recent_grep_fact(str(run / "ok.log"), ["line"], 1, 5), timeout=20) == ["line 3"]
    assert read_fact(conn, recent_grep_fact(str(run / "none.log"), ["line"], 1, 5), timeout=20) == []
    assert read_fact(conn, file_copy_fact(str(run / "none.log"), 10), timeout=20).exists is False


def test_proc_usage_reads_the_sessions_of_real_processes():
    """The live command on this machine: a sleeping child in its own session costs one process, one thread."""
    import subprocess

    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.sections import read_fact

    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        got = read_fact(LocalConnector(), usage_fact([child.pid, 999_999_999]))
    finally:
        child.kill()
        child.wait(timeout=30)
    assert set(got) == {child.pid}  # an absent session is left out, not zero
    u = got[child.pid]
    assert u.procs == 1 and u.threads == 1 and u.fds >= 3 and 0 < u.rss_bytes < 64 * 2**20 and u.cpu_s >= 0
    assert 0 < u.anon_bytes <= u.rss_bytes and u.shmem_bytes == 0


def test_proc_threads_names_this_processes_threads():
    import os
    import threading

    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.sections import read_fact

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="soak-probe-thread")
    t.start()
    try:
        got = read_fact(LocalConnector(), threads_fact(os.getpid()))
    finally:
        stop.set()
        t.join()
    assert got and all(v >= 0 for v in got.values()) and sum(got.values()) > 0, got


@pytest.mark.parametrize("content", ["", "12ab\n", "  \n"])
def test_a_pidfile_without_a_pid_names_no_process(tmp_path, content):
    """An empty pid once made the path /proc//cmdline: the kernel's command line read as a server's flags."""
    import os

    from p2p_ops.connectors import LocalConnector
    from p2p_ops.facts.envfile import process_env_fact
    from p2p_ops.facts.proc_argv import process_argv_fact
    from p2p_ops.facts.sections import read_fact

    pidfile = tmp_path / "server.pid"
    pidfile.write_text(content)
    assert read_fact(LocalConnector(), process_argv_fact(str(pidfile))) == []
    assert read_fact(LocalConnector(), process_env_fact(str(pidfile), ("PATH",))) == {"PATH": None}
    pidfile.write_text(str(os.getpid()))
    ours = open("/proc/self/cmdline").read().split("\0")[:-1]
    assert read_fact(LocalConnector(), process_argv_fact(str(pidfile))) == ours
