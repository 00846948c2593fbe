"""Where `p2pctl` writes, and how.

Results go to stdout (one JSON document with --json, nothing else there); progress, spinners and bars go to
stderr. When stdout is not a terminal, tables and lines are never wrapped (a script or an agent reads whole
lines); NO_COLOR or --no-color drop every style, bold included; -q silences progress.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Wide enough that no table or message of ours wraps when piped; rich sizes tables to their content.
PIPE_WIDTH = 100_000

_opts = {"no_color": False, "quiet": False}


class _Lazy:
    """A Console built at first use, after `configure()` read the global flags."""

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            kwargs = {} if (sys.stderr if self._stderr else sys.stdout).isatty() else {"width": PIPE_WIDTH}
            if _opts["no_color"] or "NO_COLOR" in os.environ:
                kwargs["color_system"] = None
            self._console = Console(stderr=self._stderr, highlight=False, **kwargs)
        return self._console

    def __getattr__(self, name):
        return getattr(self.get(), name)


console = _Lazy(stderr=False)
err_console = _Lazy(stderr=True)


def configure(no_color: bool = False, quiet: bool = False) -> None:
    _opts.update(no_color=no_color, quiet=quiet)
    console._console = err_console._console = None


# Characters that move the cursor, recolour, rewrite or reorder a terminal line, or hide text: C0 but tab and
# newline, DEL and C1, zero-width and bidi marks, line and paragraph separators, the byte order mark.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def plain(text: object) -> str:
    """Text from outside (a service's answer, a log line, a file or model output) as it may be printed: every
    unsafe character shown escaped (`\\x1b`, `\\u202e`), so nothing it holds drives the terminal."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


def outside(text: object) -> Text:
    """`plain`, as a rich Text: a table cell or line whose brackets are never read as markup (`[/x]`)."""
    return Text(plain(text))


def quiet() -> bool:
    return _opts["quiet"]


def progress(msg: str) -> None:
    """One progress line on stderr (silent with -q)."""
    if not _opts["quiet"]:
        err_console.print(f"[dim]·[/dim] {msg}", soft_wrap=True)


def say(*lines: str, markup: bool = True) -> None:
    """Result lines on stdout, each printed whole; empty ones are left out."""
    for line in lines:
        if line:
            console.print(line if markup else plain(line), soft_wrap=True, markup=markup)


def emit_json(doc) -> None:
    """The one JSON document a --json run prints on stdout."""
    print(json.dumps(doc, indent=2, default=str))


def table(title: str, *columns: str, rows: Iterable[Iterable[str]] = (), **kwargs) -> Table:
    t = Table(title=title, **kwargs)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    return t


def show(table) -> None:
    """Print a rich Table: boxed on a terminal; piped, its title on a line of its own and plain columns
    (no box drawing, no centring padding), so `grep`/`awk` and agents read whole rows."""
    c = console.get()
    if c.is_terminal:
        c.print(table)
        return
    if table.title:
        c.print(table.title, soft_wrap=True)
    table.title = None
    table.box = None
    table.pad_edge = False
    c.print(table)


def heading(text: str) -> None:
    """A section heading that does not draw a rule as wide as PIPE_WIDTH when piped."""
    if console.is_terminal:
        console.rule(text)
    else:
        console.print(f"== {text}")
