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
from p2p_ops.facts.logs import guard, read_cmd
from p2p_ops.facts.shellwords import Part, Statement, Word, literal, statements

_KEYWORDS = ("then", "else", "do", "{", "!")
_DECLARE = ("export", "declare", "typeset", "readonly", "local")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _assignment(word: Word) -> tuple[str, Word] | None:
    """(name, value parts) of a `NAME=value` word; None for any other word."""
    if not word or word[0].kind != "lit" or word[0].quoted:
        return None
    name, eq, rest = word[0].text.partition("=")
    if not eq or not _NAME.fullmatch(name):
        return None
    return name, ((Part("lit", rest),) if rest else ()) + word[1:]


def _words_of(st: Statement) -> list[Word]:
    words = list(st.words)
    while words and literal(words[0]) in _KEYWORDS:
        words.pop(0)
    if words and literal(words[0]) in _DECLARE:
        words.pop(0)
        while words and (literal(words[0]) or "").startswith("-"):
            words.pop(0)
        return [w for w in words if _assignment(w)]
    if any(not _assignment(w) for w in words):
        return []  # `A=1 cmd`: A is set for cmd alone (or the statement is no assignment at all)
    return words


def parse_env_sh(text: str) -> dict[str, str]:
    """`[export] KEY=VALUE` assignments, read with bash's quoting and line rules (`p2p_ops.facts.shellwords`);
    a later assignment wins, like in bash. A value bash would not parse (a quote left open) is kept raw rather
    than failing. A value the shell computes at start (`"$DEV"`, `$(ip ...)`) is left out: the file does not
    say what it will be (the process's environment does)."""
    out: dict[str, str] = {}
    for st in statements(text):
        for word in _words_of(st):
            name, value = _assignment(word)  # type: ignore[misc]
            if any(p.kind == "array" for p in value):
                continue  # a bash array is never exported
            plain = literal(value)
            if st.incomplete:
                raw = st.source.split("\n", 1)[0]
                out[name] = raw[raw.find(name + "=") + len(name) + 1:].strip()
            elif plain is None:
                out.pop(name, None)
            else:
                out[name] = plain
    return out


def _parse_env_file(text: str) -> dict[str, str]:
    return {} if text.startswith(("@@p2p-refused", "@@p2p-no-such-file")) else parse_env_sh(text)


def env_file_fact(path: str) -> CommandFact[dict[str, str]]:
    """An env.sh on its node, parsed; one that is a link, a FIFO or larger than 1 MiB is not read ({})."""
    return CommandFact("env_file", ("sh", "-c", f"{guard(path)}; {read_cmd(path, 1 << 20)}"), _parse_env_file)


def parse_environ(text: str, keys: Sequence[str]) -> dict[str, Optional[str]]:
    """Newline-separated `K=V` (environ with NULs turned into newlines) -> the asked keys, None when unset."""
    env: dict[str, Optional[str]] = {k: None for k in keys}
    for line in text.split("\n"):  # a value may hold U+2028 or \r; only a newline separates variables here
        k, _, v = line.partition("=")
        if k in env:
            env[k] = v
    return env


def process_env_fact(pidfile: str, keys: Sequence[str]) -> CommandFact[dict[str, Optional[str]]]:
    """Selected variables of the process whose pid a pidfile holds (every key None when it is unreadable)."""
    pf = shlex.quote(pidfile)
    body = (f"pid=$(cat {pf} 2>/dev/null) && case $pid in ''|*[!0-9]*) exit 1;; esac && "
            "tr '\\0' '\\n' < /proc/$pid/environ")
    return CommandFact("process_env", ("sh", "-c", body), partial(parse_environ, keys=tuple(keys)))
