"""Environment as the fleet's processes see it: a rendered env.sh, and the environment of a running process.

    parse_env_sh("export LMCACHE_CHUNK_SIZE='256'\\nexport A=1 # why") -> {"LMCACHE_CHUNK_SIZE": "256", "A": "1"}
    parse_environ("PYTHONHASHSEED=0\\nHOME=/root", keys=("PYTHONHASHSEED", "UCX_TLS"))
        -> {"PYTHONHASHSEED": "0", "UCX_TLS": None}

A process's environment is read from `/proc/<pid>/environ` for a pid named by a pidfile, and only for the keys
asked for: the rest may hold secrets.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from functools import partial
from typing import Optional

from p2p_ops.facts.base import CommandFact

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _computed(raw: str) -> bool:
    """A value the shell works out at start (`"$DEV"`, `$(ip ...)`): outside single quotes it has a `$`."""
    return "$" in re.sub(r"'[^']*'", "", raw)


def parse_env_sh(text: str) -> dict[str, str]:
    """`[export] KEY=VALUE` lines (shell-quoted values unquoted, comments dropped); a later assignment wins, like
    in bash. A value bash would not parse (a hand edit spread over lines) is kept raw rather than failing. A value
    the shell computes at start is left out: the file does not say what it will be (the process's environment
    does)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if not m or _computed(m[2]):
            continue
        try:
            parts = shlex.split(m[2], comments=True)
            out[m[1]] = parts[0] if parts else ""
        except ValueError:
            out[m[1]] = m[2].strip()
    return out


def env_file_fact(path: str) -> CommandFact[dict[str, str]]:
    return CommandFact("env_file", ("cat", path), parse_env_sh)


def parse_environ(text: str, keys: Sequence[str]) -> dict[str, Optional[str]]:
    """Newline-separated `K=V` (environ with NULs turned into newlines) -> the asked keys, None when unset."""
    env: dict[str, Optional[str]] = {k: None for k in keys}
    for line in text.splitlines():
        k, _, v = line.partition("=")
        if k in env:
            env[k] = v
    return env


def process_env_fact(pidfile: str, keys: Sequence[str]) -> CommandFact[dict[str, Optional[str]]]:
    """Selected variables of the process whose pid a pidfile holds (every key None when it is unreadable)."""
    pf = shlex.quote(pidfile)
    body = f"pid=$(cat {pf} 2>/dev/null) && tr '\\0' '\\n' < /proc/$pid/environ"
    return CommandFact("process_env", ("sh", "-c", body), partial(parse_environ, keys=tuple(keys)))
