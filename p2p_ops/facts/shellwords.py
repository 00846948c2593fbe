"""Bash source split the way bash splits it, without running any of it: statements, words and their quoting.

Used to read env.sh and the start wrappers (the doctor, `up --dry-run`): a value means what bash makes of it.
Only `\\n` ends a line (bash reads U+2028, U+2029, NEL, `\\r` and the other characters Python's `splitlines()`
breaks on as ordinary ones); quoting is bash's: `'...'` literal, `"..."` with `\\$ \\` \\" \\\\` escapes and
expansions, `$'...'` ANSI-C escapes, `\\` outside quotes, backslash-newline continuing a line, `#` starting a
comment at the start of a word. Expansions are kept, not expanded::

    statements("export A='x y'\\nexec \\"$B\\" ${C:+--c \\"$C\\"}")
    -> [Statement(line=1, words=[(Part("lit", "export"),), (Part("lit", "A="), Part("lit", "x y", True))]),
        Statement(line=2, words=[(Part("lit", "exec"),), (Part("param", "B", True),),
                                 (Part("param", "C:+--c \\"$C\\""),)])]

`p2p_ops.facts.shellview` evaluates these; `p2p_ops.facts.envfile.parse_env_sh` reads assignments from them.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

_ENDS = ("&&", "||", ";;", ";", "&", "|")
_SPECIAL_PARAMS = set("@*#?-$!0123456789")
_ASSIGN_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_ANSI = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
         "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


@dataclass(frozen=True)
class Part:
    """A piece of a word: literal text, or an expansion kept as written (`param`: the inside of `${...}` or
    the name of `$NAME`; `cmd`: the inside of `$(...)` or backquotes; `arith`: of `$((...))`; `array`: the
    elements of `NAME=(...)`). `quoted`: inside quotes (or escaped), so never split."""

    kind: str
    text: str
    quoted: bool = False
    items: tuple[tuple["Part", ...], ...] = ()


Word = tuple[Part, ...]


@dataclass
class Statement:
    line: int
    words: list[Word] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    source: str = ""
    ends: str = ""
    incomplete: bool = False

    def literal(self, i: int) -> str | None:
        """Word i when it is plain literal text (no expansion), else None."""
        return literal(self.words[i]) if i < len(self.words) else None


def literal(word: Word) -> str | None:
    if all(p.kind == "lit" for p in word):
        return "".join(p.text for p in word)
    return None


class _Reader:
    def __init__(self, text: str):
        self.text, self.i, self.n = text, 0, len(text)
        self.broken = False
        self.pending_heredocs: list[str] = []

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < self.n else ""

    # ---- balanced constructs -------------------------------------------------------------------------
    def _skip_quote(self, j: int) -> int:
        """Index after the quoted string opening at j (a backslash escapes inside double quotes)."""
        q, j = self.text[j], j + 1
        while j < self.n and self.text[j] != q:
            j += 2 if q == '"' and self.text[j] == "\\" else 1
        if j >= self.n:
            self.broken = True
        return min(j + 1, self.n)

    def balanced(self, open_: str, close: str) -> str:
        """The text up to the `close` that matches an `open_` just consumed (quotes and escapes skipped)."""
        start, depth, j = self.i, 1, self.i
        while j < self.n:
            c = self.text[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"" and not (c == "'" and open_ == "{"):
                j = self._skip_quote(j)
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    self.i = j + 1
                    return self.text[start:j]
            j += 1
        self.broken, self.i = True, self.n
        return self.text[start:]

    # ---- expansions and quotes -------------------------------------------------------------------------
    def dollar(self, quoted: bool) -> Part:
        """At a `$`: the expansion it starts (a lone `$` is literal)."""
        self.i += 1
        c = self.peek()
        if c == "{":
            self.i += 1
            return Part("param", self.balanced("{", "}"), quoted)
        if c == "(" and self.peek(1) == "(":
            self.i += 2
            inner = self.balanced("(", ")")
            if self.peek() == ")":
                self.i += 1
            return Part("arith", inner.removesuffix(")"), quoted)
        if c == "(":
            self.i += 1
            return Part("cmd", self.balanced("(", ")"), quoted)
        if c in _SPECIAL_PARAMS and c:
            self.i += 1
            return Part("param", c, quoted)
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.text, self.i)
        if m:
            self.i = m.end()
            return Part("param", m.group(), quoted)
        return Part("lit", "$", quoted)

    def backquote(self, quoted: bool) -> Part:
        self.i += 1
        start = self.i
        while self.i < self.n and self.text[self.i] != "`":
            self.i += 2 if self.text[self.i] == "\\" else 1
        inner = self.text[start:min(self.i, self.n)]
        self.broken |= self.i >= self.n
        self.i = min(self.i + 1, self.n)
        return Part("cmd", inner, quoted)

    def double_quoted(self) -> list[Part]:
        self.i += 1
        parts, buf = [], []
        while self.i < self.n and self.text[self.i] != '"':
            c = self.text[self.i]
            if c == "\\" and self.peek(1) in ('$', '`', '"', "\\", "\n"):
                if self.peek(1) != "\n":
                    buf.append(self.peek(1))
                self.i += 2
            elif c in "$`":
                if buf:
                    parts.append(Part("lit", "".join(buf), True))
                    buf = []
                parts.append(self.dollar(True) if c == "$" else self.backquote(True))
            else:
                buf.append(c)
                self.i += 1
        self.broken |= self.i >= self.n
        self.i = min(self.i + 1, self.n)
        if buf or not parts:
            parts.append(Part("lit", "".join(buf), True))  # "" still makes a word; "${A[@]}" may make none
        return parts

    def single_quoted(self) -> Part:
        end = self.text.find("'", self.i + 1)
        if end < 0:
            self.broken, end = True, self.n
        part = Part("lit", self.text[self.i + 1:end], True)
        self.i = min(end + 1, self.n)
        return part

    def ansi_c(self) -> Part:
        self.i += 2
        out = []
        while self.i < self.n and self.text[self.i] != "'":
            c = self.text[self.i]
            if c != "\\":
                out.append(c)
                self.i += 1
                continue
            out.append(self._ansi_escape())
        self.broken |= self.i >= self.n
        self.i = min(self.i + 1, self.n)
        return Part("lit", "".join(out), True)

    def _ansi_escape(self) -> str:
        c = self.peek(1)
        self.i += 2
        if c in _ANSI:
            return _ANSI[c]
        for prefix, digits, base, most in (("x", "0123456789abcdefABCDEF", 16, 2),
                                           ("u", "0123456789abcdefABCDEF", 16, 4),
                                           ("U", "0123456789abcdefABCDEF", 16, 8)):
            if c == prefix:
                j = self.i
                while j < self.n and j - self.i < most and self.text[j] in digits:
                    j += 1
                if j == self.i:
                    return "\\" + c
                value, self.i = int(self.text[self.i:j], base), j
                return chr(value) if value < 0x110000 else "\ufffd"
        if c in "01234567":
            j = self.i
            while j < self.n and j - self.i < 2 and self.text[j] in "01234567":
                j += 1
            value, self.i = int(c + self.text[self.i:j], 8), j
            return chr(value & 0xFF)
        return "\\" + c

    # ---- words and statements ---------------------------------------------------------------------------
    def word(self) -> Word:
        parts: list[Part] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                parts.append(Part("lit", "".join(buf)))
                buf.clear()

        while self.i < self.n:
            c = self.text[self.i]
            if c in " \t\n;&|<>()" and not (c == "(" and self._array_start(parts, buf)):
                break
            if c == "(":
                flush()
                self.i += 1
                parts.append(Part("array", "", items=tuple(self._array_items())))
            elif c == "\\":
                flush()
                if self.peek(1) == "\n":
                    self.i += 2
                    continue
                parts.append(Part("lit", self.peek(1), True))
                self.i += 2
            elif c == "'":
                flush()
                parts.append(self.single_quoted())
            elif c == '"':
                flush()
                parts.extend(self.double_quoted())
            elif c == "$" and self.peek(1) == "'":
                flush()
                parts.append(self.ansi_c())
            elif c == "$" and self.peek(1) == '"':
                flush()
                self.i += 1
                parts.extend(self.double_quoted())
            elif c in "$`":
                flush()
                parts.append(self.dollar(False) if c == "$" else self.backquote(False))
            else:
                buf.append(c)
                self.i += 1
        flush()
        return tuple(parts)

    @staticmethod
    def _array_start(parts: list[Part], buf: list[str]) -> bool:
        return not parts and bool(_ASSIGN_PREFIX.fullmatch("".join(buf)))

    def _array_items(self) -> list[Word]:
        items = []
        while self.i < self.n:
            c = self.text[self.i]
            if c in " \t\n":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            elif c == ")":
                self.i += 1
                return items
            elif c == "\\" and self.peek(1) == "\n":
                self.i += 2
            else:
                word = self.word()
                if not word:
                    self.i += 1  # an operator character inside the list: bash refuses it; move on
                    self.broken = True
                items.append(word)
        self.broken = True
        return items

    def _skip_comment(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = self.n if end < 0 else end

    def _redirect(self) -> str | None:
        m = re.compile(r"[0-9]*(?:&>>|&>|>>|>&|<&|<<<|<<-|<<|<>|>\||>|<)").match(self.text, self.i)
        if not m:
            return None
        self.i = m.end()
        while self.peek() in (" ", "\t"):
            self.i += 1
        target = self.word()
        op = m.group()
        text = self.text[m.start():self.i]
        if op.lstrip("0123456789") in ("<<", "<<-"):
            self.pending_heredocs.append("".join(p.text for p in target))
        return text

    def _heredoc_bodies(self) -> None:
        for delim in self.pending_heredocs:
            while self.i < self.n:
                end = self.text.find("\n", self.i)
                end = self.n if end < 0 else end
                line, self.i = self.text[self.i:end], min(end + 1, self.n)
                if line.strip("\t") == delim:
                    break
        self.pending_heredocs = []

    def statement(self) -> Statement | None:
        """The next statement (None at the end of the text); blank lines and comments are skipped."""
        start = self.i
        st = Statement(line=0)
        while self.i < self.n:
            c = self.text[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.i += 2
            elif c == "#":
                self._skip_comment()
            elif c == "\n":
                self.i += 1
                st.ends = "\n"
                self._heredoc_bodies()
                if st.words or st.redirects:
                    break
                start = self.i
            elif self.text.startswith(_ENDS, self.i):
                op = next(e for e in _ENDS if self.text.startswith(e, self.i))
                self.i += len(op)
                st.ends = op
                break
            elif c in "<>" or (c.isdigit() and re.compile(r"[0-9]+[<>]").match(self.text, self.i)):
                if not st.words and not st.redirects:
                    start = self.i
                st.redirects.append(self._redirect() or "")
            elif c in "()":
                if not st.words and not st.redirects:
                    start = self.i
                st.words.append((Part("lit", c),))
                self.i += 1
            else:
                if not st.words and not st.redirects:
                    start = self.i
                before = self.broken
                st.words.append(self.word())
                st.incomplete |= self.broken and not before
        if not st.words and not st.redirects:
            return None
        st.source = self.text[start:self.i].rstrip(";&|\n \t")
        st.line = start  # an offset until `statements` turns it into a line number
        return st


def statements(text: str) -> list[Statement]:
    """Every statement of a bash script, in order, each with the line it starts on (counting `\\n` only)."""
    reader = _Reader(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out = []
    while (st := reader.statement()) is not None:
        st.line = bisect.bisect_right(line_starts, st.line)
        out.append(st)
    return out
