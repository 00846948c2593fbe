"""Where a secret's value ends, as the text's consumer reads it (a shell word with quotes and escapes, a JSON
string, a YAML block scalar, a URL query value, an environ record): cutting at the first quote, `#` or `,` is how
tails of secrets used to leak. Line ends and PEM END markers are looked up in indexes built once per text."""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from typing import Callable

@lru_cache(maxsize=16)
def _index(text: str, pattern: str) -> list[int]:
    """Where `pattern` matches in `text`, in order: built once per text, then searched with bisect."""
    return [m.start() for m in re.finditer(pattern, text)]


def next_at(text: str, pattern: str, i: int) -> int:
    """Where `pattern` next matches at or after i (`len(text)`: nowhere)."""
    found = _index(text, pattern)
    k = bisect.bisect_left(found, i)
    return found[k] if k < len(found) else len(text)


def eol(text: str, i: int) -> int:
    return next_at(text, "\n", i)


def line_start(text: str, i: int) -> int:
    nl = _index(text, "\n")
    k = bisect.bisect_left(nl, i)
    return nl[k - 1] + 1 if k else 0


_MAX_QUOTED = 64 * 1024  # a quote that never closes within this is treated as cut off at the line's end


def quoted_end(text: str, i: int) -> int:
    """End (after the closing quote) of the quoted string opening at i; backslash escapes count inside `"`,
    in `$'...'` and in `'` strings that look like a Python/JSON repr (an escaped quote before the close)."""
    q = text[i]
    escapes = q == '"' or text[i - 1:i] == "$" or next_at(text, r"\\'", i) < min(eol(text, i), i + _MAX_QUOTED)
    j, limit = i + 1, min(len(text), i + _MAX_QUOTED)
    while j < limit:
        c = text[j]
        if c == "\\" and escapes:
            j += 2
            continue
        if c == q and q == "'" and text[j + 1:j + 2] == "'":
            j += 2  # YAML's '' is an escaped quote (in a shell it is two strings glued: same end either way)
            continue
        if c == q:
            return j + 1
        j += 1
    return eol(text, i)  # never closed: everything to the line's end may be part of it


_WORD_STOP = set(" \t\r\n;&|<>`\0")
_TRAIL = ",)}]"
_OPENER = {")": "(", "}": "{", "]": "["}


def shell_word_end(text: str, i: int) -> int:
    """End of the shell word starting at i: unquoted text, quoted parts and backslash escapes, concatenated."""
    j, n = i, len(text)
    while j < n and text[j] not in _WORD_STOP:
        c = text[j]
        if c in "\"'":
            j = quoted_end(text, j)
            # After a closing quote, `,)}]` end the value in JSON/Python/YAML flow text.
            if j < n and text[j] in _TRAIL:
                return j
            continue
        if c == "\\":
            j += 2
            continue
        j += 1
    return _trim_closers(text, i, min(j, n))


def _trim_closers(text: str, i: int, j: int) -> int:
    """Drop `,)}]` from a value's end where they close a bracket opened before the value on its line (a `,`
    always ends it); each kind is looked up once."""
    opened = {",": True}
    while j > i and text[j - 1] in _TRAIL:
        c = text[j - 1]
        if c not in opened:
            opened[c] = text.find(_OPENER[c], max(line_start(text, i), i - 4096), i) >= 0
        if not opened[c]:
            break
        j -= 1
    return j


def line_value_end(text: str, i: int) -> int:
    """A YAML/header/INI value: a quoted string, else everything to the end of the line."""
    if i < len(text) and text[i] in "\"'":
        return quoted_end(text, i)
    j = eol(text, i)
    while j > i and text[j - 1] in " \t\r":
        j -= 1
    return _trim_closers(text, i, j)


BLOCK_INDICATOR = re.compile(r"[|>][1-9+-]{0,2}[ \t]*(?:#[^\n]*)?(?=\n)")


def yaml_value_end(text: str, i: int) -> int:
    """A YAML value: a block (`|`) or folded (`>`) scalar runs over the following lines indented deeper than
    its key; any other value is `line_value_end`."""
    if not BLOCK_INDICATOR.match(text, i):
        return line_value_end(text, i)
    start = line_start(text, i)
    indent = len(text[start:i]) - len(text[start:i].lstrip(" "))
    end = j = eol(text, i)
    while j < len(text):
        nxt = eol(text, j + 1)
        line = text[j + 1:nxt]
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            break
        if line.strip():
            end = nxt
        j = nxt
    return end


def _until(stops: str) -> Callable[[str, int], int]:
    """A scanner for a bare value: it ends at whitespace or at any of `stops`."""
    run = re.compile(rf"[^\s{re.escape(stops)}]*")
    return lambda text, i: run.match(text, i).end()


token_end = _until("\"'<>,;)}]&\\`|\0")
query_end = _until("&#\"'<>`|;\0")


def record_end(text: str, i: int) -> int:
    """An environ record's value: to the next NUL (or the line's end): spaces and quotes are part of it."""
    return min(next_at(text, "\0", i), eol(text, i))

_PEM_END = r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_WINDOW = 1 << 20


def pem_end(text: str, i: int) -> int | None:
    """Where the block whose body starts at i ends (its END line), when that is near enough to be one."""
    end = next_at(text, _PEM_END, i)
    return end if end < len(text) and end - i <= _PEM_WINDOW else None

def inside_string_end(text: str, name_start: int, start: int, end: int) -> int:
    q = text[name_start - 1:name_start]
    if q in ("\"", "'") and text[start:start + 1] != q:
        close = text.find(q, start, end)
        if close >= 0:
            return close
    return end

