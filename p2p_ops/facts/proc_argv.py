"""The command line of a running process, by its pidfile: what a process was really started with.

    parse_argv("python\\n-m\\nvllm.entrypoints.openai.api_server\\n--block-size\\n128\\n")
        -> ["python", "-m", "vllm.entrypoints.openai.api_server", "--block-size", "128"]

An empty list when the pidfile or the process is gone. Only flags are judged from it (the doctor's vLLM keys);
a command line may carry a secret (an API key flag), so callers keep what they compare, not the whole line.
"""

from __future__ import annotations

import shlex

from p2p_ops.facts.base import CommandFact


def parse_argv(text: str) -> list[str]:
    return [w for w in text.split("\n") if w != ""]


def process_argv_fact(pidfile: str) -> CommandFact[list[str]]:
    body = f"pid=$(cat {shlex.quote(pidfile)} 2>/dev/null) && tr '\\0' '\\n' < /proc/$pid/cmdline"
    return CommandFact("process_argv", ("sh", "-c", body), parse_argv)
