"""Lines of an `lmcache server` log that say how it hashes, read from a running server's log.

- `Computed NONE_HASH=<value> using <algorithm>`: the root of every chunk key. Peers whose NONE_HASH differs share
  nothing.
- `Could not load '<algorithm>' from vLLM. Using builtin hash`: LMCache fell back to Python's hash(), whose
  NONE_HASH differs per process on Python < 3.12, whatever the settings say.
"""

from __future__ import annotations

import re
from typing import Optional

from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import first_match_argv, strip_ansi

_NONE_HASH = re.compile(r"Computed NONE_HASH=(.*?) using")
_FALLBACK = re.compile(r"Could not load '([^']*)' from vLLM")


def parse_none_hash(text: str) -> Optional[str]:
    return m[1] if (m := _NONE_HASH.search(text)) else None


def parse_hash_fallback(text: str) -> Optional[str]:
    return m[1] if (m := _FALLBACK.search(text)) else None


def none_hash_fact(log: str) -> CommandFact[Optional[str]]:
    return CommandFact("none_hash", first_match_argv(log, "Computed NONE_HASH="),
                       lambda text: parse_none_hash(strip_ansi(text)))


def hash_fallback_fact(log: str) -> CommandFact[Optional[str]]:
    return CommandFact("hash_fallback", first_match_argv(log, "Could not load '.*' from vLLM"),
                       lambda text: parse_hash_fallback(strip_ansi(text)))
