"""Text the toolkit parses reads the way its real consumer reads it, in linear time (issue 20, "Hostile files").

- env.sh is read only in the format p2pctl writes, and agrees with bash on it: only `\\n` ends a line (U+2028,
  U+2029 and NEL do not); any other line is foreign, never interpreted.
- Every parser of logs, traces and bundles, and the redactor, takes adversarial lines of 1-10 MB in seconds:
  the bounds are 10x or more what an idle box needs, so only a quadratic (or worse) pattern can miss them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest

from p2p_ops.diagnose.redact import redact_text
from p2p_ops.facts.envfile import parse_environ, read_env_sh
from p2p_ops.facts.sections import parse_sections
from p2p_ops.facts.ucx_log import parse_ep_config, parse_log_line, parse_nixl_line
from p2p_ops.facts.ucx_trace import parse_trace
from tests.conftest import REPO

MB = 1 << 20


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"])
def test_env_sh_lines_break_where_bash_breaks_them(sep):
    text = f"export A='x{sep}export EVIL=1'\nexport B=2\n"
    assert read_env_sh(text).env == {"A": f"x{sep}export EVIL=1", "B": "2"}


def test_environ_and_sections_split_only_on_newlines():
    assert parse_environ("A=x\u2028B=1\nC=3", ("A", "B", "C")) == {"A": "x\u2028B=1", "B": None, "C": "3"}
    out = "@@p2p-section env\nexport A='x\u2028@@p2p-rc 0'\n@@p2p-rc 0\n"
    assert parse_sections(out) == {"env": (0, "export A='x\u2028@@p2p-rc 0'")}


def test_env_sh_reader_agrees_with_bash_on_what_it_reads_and_reads_nothing_else():
    text = ("export A='a b'\"'\"'c'\nexport B=\"x\\\"y \\$z\"\nexport C=$'tab\\there'\nexport D=plain\\ word\n"
            "export E='multi\nline'\nF=after # comment\nexport G=\"$A\"\nexport H=x/y:z,1\nexport I=''\n")
    script = text + 'for v in A E H I; do printf "%s=%s\\0" "$v" "${!v}"; done\n'
    res = subprocess.run(["bash", "-c", script], capture_output=True, env={"PATH": "/usr/bin:/bin"})
    from_bash = dict(kv.split("=", 1) for kv in res.stdout.decode().split("\0") if kv)
    read = read_env_sh(text)
    assert read.env == from_bash
    # Double quotes, $'...', backslashes and anything the shell computes: foreign, shown, never read.
    assert [n for n, _ in read.foreign] == [2, 3, 4, 7, 8]


# ---- linear time on adversarial input ---------------------------------------------------------------------

ADVERSARIAL = {
    "ucx_ep_config": "[1.2] [h:1:t] ucp_worker.c:1 UCX INFO x self cfg#1 " + "a(" * (MB // 2),
    "ucx_ep_old": "[1.2] [h:1:t] ucp_worker.c:1 UCX INFO ep_cfg[0]: " + "ab(" * (MB // 3),
    "ucx_lane_dump": "# lane[1]: 5:" + "a.1 " * (MB // 4),
    "ucx_row": "[1.2] [h:1:t] | " + "| and 5% on " * (MB // 12),
    "ucx_padding": "[1.2] [h:1:t] " + " " * MB + "x",
    "nixl_glog": "I0801 15:40:05.1 " + "1" * MB,
    "nixl_vllm": "(" * MB,
    "nixl_exceptions": "nixl" * (MB // 4),
    "nixl_modified": "Modified UCX config: " + "a" * MB,
    "env_vars": "[1.2] [h:1:t] f.c:1 UCX INFO UCX_* env variables: " + "a=b " * (MB // 4),
}
REDACT = {
    "cache_key": "cache_key=" * (MB // 10),
    "api_key": "api_key=" * (MB // 8),
    "api_key_colon": "api_key: " * (MB // 9),
    "quotes": "password='" + "\\'" * (MB // 2),
    "unclosed": 'DB_PASSWORD="' + "a" * MB,
    "flags": "--token " * (MB // 8),
    "userinfo": "http://" + "a:" * (MB // 2),
    "schemes": "a://" * (MB // 4),
    "query": "?" + "a=" * (MB // 2),
    "pem_begins": "-----BEGIN PRIVATE KEY-----" * (MB // 27),
    "pem_body": "-----BEGIN PRIVATE KEY-----" + " AAAAAAAAAAAAAAAAAAAAA" * (MB // 22),
    "mysql": "mysql " + " -" * (MB // 2),
    "bearer": "Bearer " * (MB // 7),
    "authorization": "authorization: " * (MB // 15),
    "dotted_name": "a." * (MB // 2) + "=x",
    "assignments": "x_key=1 " * (MB // 8),
    "brackets": "{" + "x_token=(a, " * (MB // 12),
    "netrc": "machine h login u " * (MB // 18),
    "yaml_block": "client_secret: |\n" + "  a\n" * (MB // 4),
    "nul_environ": "A_TOKEN=x\0" * (MB // 10),
    "redis": "redis-cli" + " -a" * (MB // 3),
    "tabs": "api_key\t" * (MB // 8),
    "fullwidth_colon": "api_key：" * (MB // 8),
    "argv_list": '"--api-key", ' * (MB // 13),
    "argv_lines": "--api-key\n" * (MB // 10),
    "configure": "aws configure set " * (MB // 18) + "x",
    "userinfo_at": "http://a:" + "@" * MB,
}


def _bounded(fn, text: str, limit_s: float) -> float:
    start = time.process_time()
    fn(text)
    took = time.process_time() - start
    assert took < limit_s, f"{took:.1f} s of CPU for {len(text) / MB:.1f} MB"
    return took


ADVERSARIAL |= {
    "memlock_cause": "ibv_reg_mr " * (MB // 11),
    "uverbs_cause": "ibv_open_device(" * (MB // 16),
    "transports_cause": "transport 'a'," + "'a'," * (MB // 4),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_trace_parsers_take_a_megabyte_line_in_linear_time(name):
    from p2p_ops.diagnose.nixl.failures import classify
    from p2p_ops.diagnose.traces import trace_report

    text = ADVERSARIAL[name]
    for fn in (parse_trace, parse_log_line, parse_nixl_line, parse_ep_config, classify,
               lambda t: trace_report(parse_trace("[1.2] [h:1:t] f.c:1 UCX ERROR " + t))):
        _bounded(fn, text, 10)


@pytest.mark.parametrize("text", [
    "export A='x\n" * (MB // 12),                   # every line opens a quote it never closes
    "export A='" + "'\"'\"'" * (MB // 5) + "x",      # escaped quotes to the end, never closed
    "export A=" + "a" * MB + "'",                     # a megabyte of safe characters, then a stray quote
])
def test_env_sh_reader_takes_a_megabyte_in_linear_time(text):
    _bounded(lambda t: read_env_sh(t).env, text, 10)


@pytest.mark.parametrize("name", sorted(REDACT))
def test_redactor_takes_a_megabyte_of_adversarial_text_in_linear_time(name):
    _bounded(redact_text, REDACT[name], 20)


# The 10 MB lines and the 100 MB log take minutes on a busy 2-core box: opt-in (`make test-hostile`), figures printed.
soak = pytest.mark.skipif(not os.environ.get("P2P_SOAK"), reason="10-100 MB inputs: make test-hostile (P2P_SOAK=1)")


@pytest.mark.fuzz
@soak
def test_redactor_and_trace_parser_take_ten_megabyte_lines():
    took = [_bounded(redact_text, "cache_key=" * (MB // 1), 60), _bounded(redact_text, "api_key=" * (MB // 1), 60),
            _bounded(parse_trace, "[1.2] [h:1:t] ucp_worker.c:1 UCX INFO x self cfg#1 " + "a(" * (5 * MB), 60)]
    print("10 MB lines, CPU s: redact cache_key= %.1f, redact api_key= %.1f, trace a( %.1f" % tuple(took))


HUNDRED_MB_CHILD = r"""
import resource, sys, time
from pathlib import Path
from p2p_ops.diagnose.redact import redact_text
from p2p_ops.facts.ucx_trace import parse_trace
from p2p_ops.files import read_text
path = Path(sys.argv[1])
t = time.process_time()
summary = parse_trace(read_text(path, cap=200 << 20))
trace_s = time.process_time() - t
t = time.process_time()
red = redact_text(read_text(path, cap=200 << 20))
redact_s = time.process_time() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
print(trace_s, redact_s, rss, summary.lines_read, len(red.redactions))
"""


@pytest.mark.fuzz
@soak
def test_a_hundred_megabyte_log_under_time_and_memory_bounds(tmp_path):
    block = ("[1764467401.123456] [node-a:1234:0]     ucp_worker.c:1997 UCX  INFO  B intra-node cfg#1 "
             "rma_am(tcp/lo) am(tcp/lo cma/memory)\n"
             "[2026-11-30 02:28:01,789] LMCache INFO: stored chunk cache_key=abc123 prefix_key=p1 size=262144\n"
             "I0801 15:40:05.042247    1049 config.cpp:43] Modified UCX config: MAX_RMA_RAILS=2\n"
             "[2026-11-30 02:28:01,790] LMCache WARNING: env OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123\n")
    path = tmp_path / "big.log"
    with path.open("w") as f:
        for _ in range(100 * MB // (len(block) * 64) + 1):
            f.write(block * 64)
    size = path.stat().st_size
    assert size >= 100 * MB
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", HUNDRED_MB_CHILD, str(path)], capture_output=True, text=True,
                         timeout=900, env=env)
    assert res.returncode == 0, res.stderr
    trace_s, redact_s, rss, lines, redactions = res.stdout.split()
    print(f"100 MB log: trace {float(trace_s):.1f} s, redact {float(redact_s):.1f} s, "
          f"peak RSS {int(rss) / MB:.0f} MiB")
    assert int(lines) > 900_000 and int(redactions) > 200_000
    assert float(trace_s) < 300 and float(redact_s) < 300
    # The text itself (100 MB, held twice at most: the read and the redacted copy) plus the interpreter.
    assert int(rss) < 4 * size + 400 * MB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
