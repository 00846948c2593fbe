"""Lines of an `lmcache server` log that say how it hashes, read from a running server's log.

- `Computed NONE_HASH=<value> using <algorithm>`: the root of every chunk key. Peers whose NONE_HASH differs share
  nothing.
- `Could not load '<algorithm>' from vLLM. Using builtin hash`: LMCache fell back to Python's hash(), whose
  NONE_HASH differs per process on Python < 3.12, whatever the settings say.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Optional

from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import first_match_argv, strip_ansi

_NONE_HASH = re.compile(r"Computed NONE_HASH=(.*?) using")
_FALLBACK = re.compile(r"Could not load '([^']*)' from vLLM")


def _first_group(pattern: re.Pattern, text: str) -> Optional[str]:
    return m[1] if (m := pattern.search(strip_ansi(text))) else None


parse_hash_fallback = partial(_first_group, _FALLBACK)


def none_hash_fact(log: str) -> CommandFact[Optional[str]]:
    return CommandFact("none_hash", first_match_argv(log, "Computed NONE_HASH="), partial(_first_group, _NONE_HASH))


def hash_fallback_fact(log: str) -> CommandFact[Optional[str]]:
    return CommandFact("hash_fallback", first_match_argv(log, "Could not load '.*' from vLLM"), parse_hash_fallback)
