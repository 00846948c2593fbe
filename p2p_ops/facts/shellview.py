"""What a start wrapper would do, worked out from its text alone: nothing is executed.

`ShellView(files).run(name)` walks the statements of a wrapper (`p2p_ops.facts.shellwords`) the way bash would
for what the toolkit renders: assignments (scalars and arrays, `export`), `source` of the unit's env.sh, `if [ ...
]; then ... else ... fi` on known values, `set`, `unset`, messages to stderr, and the `exec` line, whose argv is
expanded with bash's rules (`"$A"`, `${A:-x}`, `${A:+--flag "$A"}`, `"${ARR[@]}"`, `${A%%@*}`, word splitting of
unquoted expansions, empty-word removal). What it cannot know (a command substitution, a variable set by one)
stays unknown, and every other statement is listed in `runs` with its file and line instead of being run::

    view = ShellView({"start_server.sh": wrapper, "env.sh": env_sh}, here="/run/f/a-0")
    view.run("start_server.sh")
    view.argv  -> ["nice", "-n", "10", "/venv/bin/lmcache", "server", "--instance-id", "a-0", ...]
    view.runs  -> [Ran("env.sh", 41, "touch /tmp/x")]
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Optional, Union

from p2p_ops.facts.shellwords import Part, Statement, Word, literal, statements

Value = Union[str, list[str]]
Piece = tuple[Optional[str], bool]


class _Pieces(list):
    """The expanded word of `${A:-word}` / `${A:+word}`, as (text, splittable) pieces."""
# The wrappers' own folder, worked out by bash at start; the view is told what it is.
HERE_IDIOM = 'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"'
_HARMLESS = {"set", "true", ":", "shopt", "umask"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<index>\[[@*]\])?(?P<op>:-|:\+|:=|:\?|-|\+|=|\?|%%|%|##|#)?"
                    r"(?P<word>.*)", re.S)


class Unknown(Exception):
    """A value bash works out only at start (a command substitution, or a variable set from one)."""


@dataclass(frozen=True)
class Ran:
    file: str
    line: int
    text: str


@dataclass
class ShellView:
    files: dict[str, str]
    here: str = ""
    vars: dict[str, Value] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)
    runs: list[Ran] = field(default_factory=list)
    argv: Optional[list[str]] = None
    exports: set[str] = field(default_factory=set)

    # ---- expansion -------------------------------------------------------------------------------------
    def _param(self, expr: str) -> Union[None, str, list[str], _Pieces]:
        if expr == "BASH_SOURCE[0]":
            return self.here
        m = _PARAM.fullmatch(expr)
        if not m or (m["word"] and not m["op"]):
            raise Unknown(f"${{{expr}}}")
        name, op, word = m["name"], m["op"], m["word"]
        if name in self.unknown:
            raise Unknown(f"${name}")
        value = self.vars.get(name)
        if isinstance(value, list) and not m["index"]:
            value = value[0] if value else ""
        if not op:
            return value
        is_set = value is not None and (op[0] != ":" or value not in ("", []))
        if op in (":-", "-", ":=", "="):
            return value if is_set else self._word_value(word)
        if op in (":+", "+"):
            return self._word_value(word) if is_set else None
        if op in (":?", "?"):
            return value
        return _trim(op, "" if value is None else " ".join(value) if isinstance(value, list) else value, word)

    def _word_value(self, text: str) -> _Pieces:
        """A `${A:-word}` word: its pieces, quoting kept (unquoted spaces split the result)."""
        out = _Pieces()
        for i, word in enumerate(w for st in statements(text.replace("\n", " ")) for w in st.words):
            if i:
                out.append((" ", True))
            out += self._pieces(word)
        return out

    def _pieces(self, word: Word) -> list[Piece]:
        """(text, splittable) pieces of one word; (None, False) separates the elements of "${ARR[@]}"."""
        out: list[Piece] = []
        for part in word:
            if part.kind == "lit":
                out.append((part.text, not part.quoted))
            elif part.kind in ("cmd", "arith"):
                raise Unknown(f"$({part.text})")
            elif part.kind == "param":
                out += self._param_pieces(part)
            else:
                raise Unknown("an array")
        return out

    def _param_pieces(self, part: Part) -> list[Piece]:
        value = self._param(part.text)
        if value is None:
            return [("", False)] if part.quoted else []
        if isinstance(value, _Pieces):
            return [(t, False) for t, _ in value] if part.quoted else list(value)
        if isinstance(value, list):
            if not part.quoted:
                return [(" ".join(value), True)]
            pieces: list[Piece] = []
            for i, item in enumerate(value):
                pieces += ([(None, False)] if i else []) + [(item, False)]
            return pieces
        return [(value, not part.quoted)]

    def expand(self, word: Word) -> list[str]:
        """The words bash makes of one word: quoted parts kept, unquoted expansions split on blanks, a word
        that is only an empty unquoted expansion dropped."""
        words: list[str] = []
        cur: list[str] = []
        exists = False
        for text, splittable in self._pieces(word):
            if text is None:  # between two elements of "${ARR[@]}"
                words.append("".join(cur))
                cur, exists = [], True
            elif not splittable:
                cur.append(text)
                exists = True
            else:
                for i, chunk in enumerate(re.split(r"[ \t\n]+", text)):
                    if i:
                        if exists or "".join(cur):
                            words.append("".join(cur))
                        cur, exists = [], False
                    cur.append(chunk)
        if exists or "".join(cur):
            words.append("".join(cur))
        return words

    def scalar(self, word: Word) -> str:
        """An assignment's value: expanded, never split ("${ARR[@]}" joins with spaces)."""
        return "".join(" " if text is None else text for text, _ in self._pieces(word))

    # ---- statements --------------------------------------------------------------------------------------
    def run(self, name: str) -> None:
        """Walk `files[name]` from the top; stops at its `exec`."""
        stack: list[Optional[bool]] = []  # per open `if`: branch taken (True/False) or not known (None)
        for st in statements(self.files.get(name, "")):
            if self.argv is not None:
                return
            self._statement(name, st, stack)

    def _statement(self, name: str, st: Statement, stack: list[Optional[bool]]) -> None:
        words = list(st.words)
        head = literal(words[0]) if words else None
        if head in ("if", "elif"):
            cond = self._condition(words[1:]) if not st.redirects else None
            if head == "if":
                stack.append(cond)
            elif stack:
                stack[-1] = None if stack[-1] is None or cond is None else (not stack[-1] and cond)
            return
        if head in ("then", "else", "fi"):
            if head == "else" and stack:
                stack[-1] = None if stack[-1] is None else not stack[-1]
            elif head == "fi" and stack:
                stack.pop()
            words = words[1:]
            if not words:
                return
            head = literal(words[0])
        if any(v is False for v in stack):
            return
        guessing = any(v is None for v in stack)
        self._command(name, st, words, head, guessing)

    def _command(self, name: str, st: Statement, words: list[Word], head: Optional[str], guessing: bool) -> None:
        if st.source.strip() == HERE_IDIOM:
            self.vars["here"] = self.here
            return
        if st.ends in ("|", "&", "&&", "||") or (st.redirects and not _to_stderr(st.redirects)):
            self.runs.append(Ran(name, st.line, st.source))
            return
        if head in ("export", "declare", "readonly", "typeset", "local") or (words and _is_assignment(words[0])):
            self._assign(name, st, words, guessing)
        elif head in _HARMLESS or head in ("echo", "printf") and not _substitutes(words):
            return
        elif head == "unset":
            for w in words[1:]:
                self.vars.pop(literal(w) or "", None)
        elif head in ("source", ".") and len(words) == 2 and self._sourced(words[1]) in self.files:
            self.run(self._sourced(words[1]))
        elif head == "exec" and not guessing:
            try:
                self.argv = [a for w in words[1:] for a in self.expand(w)]
            except Unknown as exc:
                self.argv = [f"<unknown until start: {exc}>"]
        else:
            self.runs.append(Ran(name, st.line, st.source))

    def _sourced(self, word: Word) -> str:
        try:
            path = self.scalar(word)
        except Unknown:
            return ""
        return path.rsplit("/", 1)[-1] if self.here and path.startswith(self.here + "/") else path

    def _assign(self, name: str, st: Statement, words: list[Word], guessing: bool) -> None:
        declare = literal(words[0]) in ("export", "declare", "readonly", "typeset", "local")
        targets = [w for w in words[1 if declare else 0:] if not (literal(w) or "").startswith("-")]
        if not declare and any(not _is_assignment(w) for w in targets):
            self.runs.append(Ran(name, st.line, st.source))  # `A=1 cmd`: runs cmd
            return
        for word in targets:
            if not _is_assignment(word):
                self.exports.add(literal(word) or "")
                continue
            var, value = _split_assignment(word)
            if declare and literal(words[0]) == "export":
                self.exports.add(var)
            self._set(var, value, guessing, name, st)

    def _set(self, var: str, value: Word, guessing: bool, name: str, st: Statement) -> None:
        try:
            if value and value[-1].kind == "array":
                items = [a for item in value[-1].items for a in self.expand(item)]
                self.vars[var] = items
            else:
                self.vars[var] = self.scalar(value)
            if guessing:
                raise Unknown(var)
            self.unknown.discard(var)
        except Unknown:
            self.unknown.add(var)
            if any(p.kind == "cmd" for p in value):
                self.runs.append(Ran(name, st.line, st.source))

    def _condition(self, words: list[Word]) -> Optional[bool]:
        """`[ ... ]` / `test ...` on known values; None when it cannot be known here."""
        if not words or literal(words[0]) not in ("[", "test"):
            return None
        try:
            args = [a for w in words[1:] for a in self.expand(w)]
        except Unknown:
            return None
        if literal(words[0]) == "[":
            if not args or args[-1] != "]":
                return None
            args = args[:-1]
        return _test(args)


def _test(args: list[str]) -> Optional[bool]:
    if args[:1] == ["!"]:
        inner = _test(args[1:])
        return None if inner is None else not inner
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2 and args[0] in ("-n", "-z"):
        return (args[1] != "") == (args[0] == "-n")
    if len(args) == 3 and args[1] in ("=", "==", "!="):
        return (args[0] == args[2]) == (args[1] != "!=")
    return None


def _trim(op: str, value: str, pattern: str) -> str:
    """`${A%%pat}` and friends, pattern being a glob."""
    indexes = range(len(value), -1, -1) if op in ("%", "##") else range(len(value) + 1)
    for i in indexes:
        if op in ("%", "%%") and fnmatch.fnmatchcase(value[i:], pattern):
            return value[:i]
        if op in ("#", "##") and fnmatch.fnmatchcase(value[:i], pattern):
            return value[i:]
    return value


def _is_assignment(word: Word) -> bool:
    if not word or word[0].kind != "lit" or word[0].quoted:
        return False
    name, eq, _ = word[0].text.partition("=")
    return bool(eq) and bool(_NAME.fullmatch(name.rstrip("+")))


def _split_assignment(word: Word) -> tuple[str, Word]:
    name, _, rest = word[0].text.partition("=")
    return name.rstrip("+"), ((Part("lit", rest),) if rest else ()) + word[1:]


def _substitutes(words: list[Word]) -> bool:
    return any(p.kind in ("cmd", "arith") for w in words for p in w)


def _to_stderr(redirects: list[str]) -> bool:
    return all(r.replace(" ", "") in (">&2", "1>&2", "2>&1", "2>/dev/null", ">/dev/null") for r in redirects)
