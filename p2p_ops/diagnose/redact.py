"""Secret redaction for anything that leaves the host (debug bundles, reports, pasted logs).

`redact_text` returns the redacted text and a `Redaction(kind, where, line, name)` per secret for the bundle
manifest; `redact_structure` redacts a YAML/JSON document from its parsed structure (no layout hides a value);
`scrub_known` removes secret values already known wherever they stand. A finding never holds the secret, not
even a hash (short passwords would be guessable from one).

A rule (`RULES`, and `.netrc` entries) finds where a secret *starts*; a scanner follows the value to its real end
as the text's consumer reads it (a shell word with quotes and escapes, a JSON/Python string, a YAML/header value
to the end of its line or block scalar, a URL query value to `&`, an environ record to its NUL): cutting at the
first quote, `#` or `,` is how tails of secrets used to leak. Overlapping spans merge, so the widest reading
wins. Diagnostic names and values (cache and chunk keys, hashes, GIDs, auth modes, "set (not shown)") are left
alone; only the value is replaced (one quoted string keeps its quotes), so files stay readable.

Linear time: each regex is anchored or bounded, a match inside a span its rule already found is not scanned
again, and line ends and PEM END markers are looked up in indexes built once per text.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator

import yaml

__all__ = ["MASK", "Redaction", "RedactionResult", "is_secret_name", "manifest_entries", "redact_structure",
           "redact_text", "scrub_known"]

MASK = "<redacted>"

# Which names hold secrets: `is_secret_name("DB_PASSWORD")`, also glued to a prefix without a separator as some
# database clients spell theirs (`PGPASSWORD`, `MYSQLPASSWORD`). A bundle exists to show cache and chunk keys,
# hashes, GIDs, auth modes and the toolkit's "set (not shown)": those names (`DIAGNOSTIC_KEYS`) and values
# (`AUTH_MODES`, `harmless`) survive redaction unchanged.
_LAST_WORDS = {"password", "passwd", "passphrase", "pass", "secret", "secrets", "token", "credential",
               "credentials", "apikey", "accesskey", "accountkey", "privatekey", "auth", "authorization",
               "cookie", "pwd", "key", "json", "sig", "signature"}
# Bare `PWD` is the shell's working directory and a bare `key`/`json`/`sig` is usually a cache key or a
# config blob: these words count only after a prefix (MYSQL_PWD, API_KEY, GOOGLE_CREDENTIALS_JSON).
_NEEDS_PREFIX = {"pwd", "key", "json", "sig", "signature"}
_ANYWHERE = {"secret", "password", "passwd", "passphrase"}
# Long enough not to end an ordinary word: `PGPASSWORD` is a secret, `bypass` and `compass` are not.
_GLUED = re.compile(r".(?:password|passwd|passphrase|secret|apikey|accesstoken|authtoken|privatekey)$")
# Tokenizer settings (`eos_token: "</s>"`) and per-token rates (`prefill_us_per_token`) are not credentials.
_NOT_SECRET_BEFORE_TOKEN = {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "per", "max", "num", "first",
                            "last", "next", "end", "start", "special", "prompt", "cached", "hit"}
# What a name about a secret is, when it is not the secret itself: `password_policy`, `secret_sharing_mode`.
_ABOUT_A_SECRET = {"policy", "file", "path", "length", "min", "max", "rules", "prompt", "mode", "enabled",
                   "disabled", "type", "kind", "count", "size", "dir", "name", "names", "format", "version", "ttl"}
# The toolkit's diagnostic keys: `<word>_key` names that identify data, never unlock anything (LMCache's
# cache and chunk keys, object and prefix keys, routing keys, `--block-hash-key`, a GID table's key).
DIAGNOSTIC_KEYS = {"cache", "chunk", "object", "prefix", "routing", "hash", "gid", "lookup", "partition", "shard",
                   "sort", "primary", "foreign", "index", "block", "kv", "event", "metric", "label", "group",
                   "dict", "map", "dedup", "bucket", "row", "column"}
# Values of an `*_auth` name that say how one authenticates, not with what.
AUTH_MODES = {"publickey", "password", "keyboard-interactive", "none", "hostbased", "gssapi-with-mic", "basic",
              "bearer", "digest", "token", "kerberos", "negotiate", "ntlm", "oauth", "oauth2", "mtls", "tls",
              "off", "on", "true", "false", "disabled", "enabled", "anonymous", "sasl", "scram-sha-256", "md5",
              "trust", "peer", "ident", "required", "optional"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Values that are already placeholders, references or empty are left alone: redacting them hides nothing.
_HARMLESS = re.compile(r"^[\"']?(?:|<redacted>|\*+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]{0,200}>|null|none|None|"
                       r"true|false|True|False|\[\]|\{\}|set \(not shown\))[\"']?$")


def name_parts(name: str) -> list[str]:
    return [p for p in re.split(r"[_.\-\s]+", _CAMEL.sub("_", name.strip("-_.")).lower()) if p]


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag of this name holds a secret (cached: a log repeats its names)."""
    parts = name_parts(name[:200])
    if not parts:
        return False
    last = parts[-1]
    if last == "id" and len(parts) >= 3 and parts[-2] == "key":  # private_key_id, AWS_ACCESS_KEY_ID
        return True
    if last in {"token", "tokens"} and len(parts) >= 2 and parts[-2] in _NOT_SECRET_BEFORE_TOKEN:
        return False
    if last == "key" and len(parts) >= 2 and parts[-2] in DIAGNOSTIC_KEYS:
        return False
    if last in _LAST_WORDS:
        return len(parts) > 1 or last not in _NEEDS_PREFIX
    if _GLUED.search(last):
        return True
    return any(p in _ANYWHERE for p in parts[:-1]) and last not in _ABOUT_A_SECRET


def harmless(name: str, value: str) -> bool:
    """A value that hides nothing: empty, a placeholder or reference, or an auth mode under an `*_auth` name."""
    if _HARMLESS.match(value[:300]):
        return True
    parts = name_parts(name) if name else []
    return bool(parts) and parts[-1] == "auth" and value.strip("\"'").lower() in AUTH_MODES


@dataclass(frozen=True)
class Redaction:
    kind: str
    where: str
    line: int
    name: str = ""


@dataclass
class RedactionResult:
    text: str
    redactions: list[Redaction]
    values: dict[str, str] = field(default_factory=dict)  # each secret removed -> its name; never written out


@lru_cache(maxsize=16)
def _index(text: str, pattern: str) -> list[int]:
    """Where `pattern` matches in `text`, in order: built once per text, then searched with bisect."""
    return [m.start() for m in re.finditer(pattern, text)]


def _next(text: str, pattern: str, i: int) -> int:
    """Where `pattern` next matches at or after i (`len(text)`: nowhere)."""
    found = _index(text, pattern)
    k = bisect.bisect_left(found, i)
    return found[k] if k < len(found) else len(text)


def _eol(text: str, i: int) -> int:
    return _next(text, "\n", i)


def _line_start(text: str, i: int) -> int:
    nl = _index(text, "\n")
    k = bisect.bisect_left(nl, i)
    return nl[k - 1] + 1 if k else 0


# A scanner gets the text and the index where the value starts and returns where the value ends.

_MAX_QUOTED = 64 * 1024  # a quote that never closes within this is treated as cut off at the line's end


def _quoted_end(text: str, i: int) -> int:
    """End (after the closing quote) of the quoted string opening at i; backslash escapes count inside `"`,
    in `$'...'` and in `'` strings that look like a Python/JSON repr (an escaped quote before the close)."""
    q = text[i]
    escapes = q == '"' or _backslash_escapes_single(text, i)
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
    return _eol(text, i)  # never closed: everything to the line's end may be part of it


def _backslash_escapes_single(text: str, i: int) -> bool:
    # `$'..'` (bash ANSI-C quoting) and Python reprs escape a single quote with a backslash.
    return (i > 0 and text[i - 1] == "$") or _next(text, r"\\'", i) < min(_eol(text, i), i + _MAX_QUOTED)


_WORD_STOP = set(" \t\r\n;&|<>`\0")
_TRAIL = ",)}]"


def shell_word_end(text: str, i: int) -> int:
    """End of the shell word starting at i: unquoted text, quoted parts and backslash escapes, concatenated."""
    j, n = i, len(text)
    while j < n and text[j] not in _WORD_STOP:
        c = text[j]
        if c in "\"'":
            j = _quoted_end(text, j)
            # After a closing quote, `,)}]` end the value in JSON/Python/YAML flow text.
            if j < n and text[j] in _TRAIL:
                return j
            continue
        if c == "\\":
            j += 2
            continue
        j += 1
    return _trim_closers(text, i, min(j, n))


_OPENER = {")": "(", "}": "{", "]": "["}


def _trim_closers(text: str, i: int, j: int) -> int:
    """Drop `,)}]` from a value's end where they close a bracket opened before the value on its line (a `,`
    always ends it); each kind is looked up once."""
    opened = {",": True}
    while j > i and text[j - 1] in _TRAIL:
        c = text[j - 1]
        if c not in opened:
            opened[c] = text.find(_OPENER[c], max(_line_start(text, i), i - 4096), i) >= 0
        if not opened[c]:
            break
        j -= 1
    return j


def line_value_end(text: str, i: int) -> int:
    """A YAML/header/INI value: a quoted string, else everything to the end of the line."""
    if i < len(text) and text[i] in "\"'":
        return _quoted_end(text, i)
    j = _eol(text, i)
    while j > i and text[j - 1] in " \t\r":
        j -= 1
    return _trim_closers(text, i, j)


_BLOCK_INDICATOR = re.compile(r"[|>][1-9+-]{0,2}[ \t]*(?:#[^\n]*)?(?=\n)")


def yaml_value_end(text: str, i: int) -> int:
    """A YAML value: a block (`|`) or folded (`>`) scalar runs over the following lines indented deeper than
    its key; any other value is `line_value_end`."""
    if not _BLOCK_INDICATOR.match(text, i):
        return line_value_end(text, i)
    start = _line_start(text, i)
    indent = len(text[start:i]) - len(text[start:i].lstrip(" "))
    end = j = _eol(text, i)
    while j < len(text):
        nxt = _eol(text, j + 1)
        line = text[j + 1:nxt]
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            break
        if line.strip():
            end = nxt
        j = nxt
    return end


def _until(stops: str) -> Callable[[str, int], int]:
    """A scanner for a bare value: it ends at whitespace or at any of `stops`."""
    def end(text: str, i: int) -> int:
        j = i
        while j < len(text) and not (text[j].isspace() or text[j] in stops):
            j += 1
        return j
    return end


_token_end = _until("\"'<>,;)}]&\\`|\0")
_query_end = _until("&#\"'<>`|;\0")


def _record_end(text: str, i: int) -> int:
    """An environ record's value: to the next NUL (or the line's end): spaces and quotes are part of it."""
    return min(_next(text, "\0", i), _eol(text, i))


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern
    scan: Callable[[str, int], int] | None = None  # None: the `s` group's own end
    check: Callable[[re.Match], bool] | None = None  # extra test on the match (e.g. the name is a secret)
    needles: tuple[str, ...] = ()  # the rule cannot match a text holding none of these (lower case)


def _named(m: re.Match) -> bool:
    return is_secret_name(m.group("n"))


_TOKEN_PREFIXES = (
    ("openai_key", r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}", "sk-"),
    ("stripe_key", r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", "k_"),
    ("huggingface_token", r"hf_[A-Za-z0-9]{20,}", "hf_"),
    ("github_token", r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,})", "g"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}", "glpat-"),
    ("slack_token", r"xox[abprse]-[A-Za-z0-9-]{10,}", "xox"),
    ("nvidia_api_key", r"nvapi-[A-Za-z0-9_-]{20,}", "nvapi-"),
    ("aws_access_key_id", r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])", "ia"),
    ("gcp_api_key", r"AIza[0-9A-Za-z_-]{35}", "aiza"),
    ("google_oauth_token", r"ya29\.[0-9A-Za-z_-]{20,}", "ya29."),
    ("npm_token", r"npm_[A-Za-z0-9]{30,}", "npm_"),
    ("pypi_token", r"pypi-AgE[A-Za-z0-9_-]{30,}", "pypi-"),
    ("sendgrid_key", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", "sg."),
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "eyj"),
)

_NAME = r"(?P<n>[A-Za-z_][A-Za-z0-9_.-]{0,200})"
_FREE = r"(?<![A-Za-z0-9_.-])"
# Short password flags of common clients: (tools, flag). The flag's value is the secret (curl's after `user:`).
_CLIENT_FLAGS = (
    ("redis-cli", r"-a"), ("ldapsearch|ldapmodify|ldapadd|ldapdelete|ldapwhoami|ldappasswd", r"-w"),
    ("sqlcmd|bcp", r"-P"), ("mongo|mongosh|mongodump|mongorestore", r"-p"), ("zip|unzip", r"-P"),
    ("smbclient", r"-U[ \t]*[^%\s]+%"),
)
_TOOL_SPAN = r"[^\n]{0,400}?(?<=\s)"  # the flag within a bounded stretch of the tool's command line


def _client_flag_rules() -> tuple[Rule, ...]:
    return tuple(Rule("cli_password", re.compile(rf"\b(?:{tools})\b{_TOOL_SPAN}{flag}[ \t]*(?P<s>[^\s-])"),
                      shell_word_end, needles=tuple(t.split("-")[0] for t in tools.split("|")))
                 for tools, flag in _CLIENT_FLAGS)


RULES: tuple[Rule, ...] = (
    # A BEGIN line; its block ends at the next END line (`_pem_end`, from an index of END lines).
    Rule("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?P<s>)"), None,
         needles=("private key",)),
    # A block cut off before its END line (truncated log tails) still leaks key material.
    Rule("private_key", re.compile(
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?P<s>(?:\s*(?:\\n)?[A-Za-z0-9+/=:-]{16,})+)"),
        needles=("private key",)),
    *(Rule(kind, re.compile(r"(?<![A-Za-z0-9])(?P<s>" + rx + ")"), _token_end, needles=(needle,))
      for kind, rx, needle in _TOKEN_PREFIXES),
    Rule("bearer_token", re.compile(r"(?i)\bBearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), _token_end,
         needles=("bearer",)),
    # Any scheme (Basic, Token, Digest, AWS4-HMAC-SHA256, a bare key); the scheme word itself stays.
    Rule("authorization", re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*(?P<oq>[\"']?)(?:(?:Bearer|Basic|Token|Digest|Negotiate|"
        r"AWS4-HMAC-SHA256)\s+)?(?P<s>\S)"), None, needles=("authorization",)),
    Rule("cookie", re.compile(r"(?i)\b(?:set-)?cookie[\"']?\s*:\s*(?P<oq>[\"']?)(?P<s>\S)"), None,
         needles=("cookie",)),
    Rule("url_password", re.compile(
        r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://(?P<u>[^\s:/?#@\"'<>]{0,200}):(?P<s>[^\s/\"'<>@]{0,500})@"),
        needles=("://",)),
    # A bare token as the user (`https://ghp_x@github.com`, `https://<40 hex>@host`).
    Rule("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://(?P<s>[A-Za-z0-9_-]{24,500})@"),
         needles=("://",)),
    Rule("url_query_secret", re.compile(r"[?&;]" + _NAME + r"=(?P<s>[^&#\s\"'<>]+)"), _query_end,
         lambda m: is_secret_name(m.group("n")) or m.group("n").lower() in {"key", "sig", "code", "signature"},
         needles=("=",)),
    Rule("webhook_url", re.compile(r"(?:hooks\.slack\.com/(?:services|workflows|triggers)"
                                   r"|discord(?:app)?\.com/api/webhooks)/(?P<s>[A-Za-z0-9/_-]+)"), _token_end,
         needles=("hooks.slack", "discord")),
    Rule("mysql_password", re.compile(
        rf"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport)\b{_TOOL_SPAN}-p(?P<s>[^\s-])"),
        shell_word_end, needles=("mysql", "mariadb")),
    Rule("sshpass_password", re.compile(r"\bsshpass\s+-p\s*(?P<s>\S)"), shell_word_end, needles=("sshpass",)),
    *_client_flag_rules(),
    Rule("cli_password", re.compile(rf"\bcurl\b{_TOOL_SPAN}(?:-u|--user)[ \t=]*(?P<oq>[\"']?)[^\s:\"']{{1,200}}:"
                                    r"(?P<s>[^\s\"'])"), shell_word_end, needles=("curl",)),
    Rule("cli_password", re.compile(r"(?<![\w-])-pass(?:in|out)?[ \t]+(?P<oq>[\"']?)pass:(?P<s>[^\s\"'])"),
         shell_word_end, needles=("pass:",)),
    Rule("cli_password", re.compile(r"(?<![\w-])-(?:src|dest|new)?(?:store|key)pass[ \t]+(?P<s>[^\s-])"),
         shell_word_end, needles=("pass",)),
    # An environ record (`/proc/<pid>/environ`, NUL-separated): the value runs to its NUL, spaces included.
    Rule("secret_assignment", re.compile(r"(?:^|(?<=\0))" + _NAME + r"=(?P<s>[^\0\n])"), _record_end, _named,
         needles=("\0",)),
    # `NAME=value` starting a line (env output, a .env file): everything to the line's end may be the value.
    Rule("secret_assignment", re.compile(r"(?m)^" + _NAME + r"=(?P<s>[^\s\"'=])"), line_value_end, _named,
         needles=("=",)),
    # NAME=value (shell/env/INI); `NAME = value` (INI/TOML, spaces allowed in the value) reads to the line end.
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)=(?P<s>[^\s=])"), shell_word_end, _named,
         needles=("=",)),
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)[ \t]+=[ \t]*(?P<s>\S)"), line_value_end,
         _named, needles=("=",)),
    # NAME: value (YAML incl. block scalars, JSON, Python reprs, headers).
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)[ \t]*:[ \t]*(?P<s>\S)"), yaml_value_end,
         _named, needles=(":",)),
    Rule("secret_flag", re.compile(r"(?<![\w-])--(?P<n>[A-Za-z0-9][A-Za-z0-9_-]{0,100})(?:=|[ \t]+)(?P<s>[^\s-])"),
         shell_word_end, _named, needles=("--",)),
)
_PEM_END = r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_WINDOW = 1 << 20


def _pem_end(text: str, i: int) -> int | None:
    """Where the block whose body starts at i ends (its END line), when that is near enough to be one."""
    end = _next(text, _PEM_END, i)
    return end if end < len(text) and end - i <= _PEM_WINDOW else None


# .netrc: `machine HOST login USER password SECRET` over one line or several.
_NETRC_ENTRY = re.compile(r"(?m)^[ \t]*(?:machine[ \t]+\S|default\b)")
_NETRC_TOKEN = re.compile(r"\S+")


def _netrc(text: str) -> Iterator[tuple[int, int, str]]:
    for entry in _NETRC_ENTRY.finditer(text):
        tokens = _NETRC_TOKEN.finditer(text, entry.start())
        previous = ""
        for n, tok in enumerate(tokens):
            word = tok.group()
            if n and word in ("machine", "default") or n > 64:
                break
            if previous in ("password", "passwd", "account"):
                yield tok.start(), tok.end(), previous
            previous = word if previous not in ("password", "passwd", "account") else ""


def _value_span(text: str, rule: Rule, m: re.Match) -> tuple[int, int] | None:
    start = m.start("s")
    if rule.kind == "private_key" and rule.scan is None and not m.group("s"):
        end = _pem_end(text, start)
        return None if end is None else (start, end)
    end = rule.scan(text, start) if rule.scan else m.end("s")
    quote = m.groupdict().get("oq")
    if rule.kind in ("authorization", "cookie"):
        end = line_value_end(text, start)
        if quote:  # the value opened a quote before the scheme word: it ends where that quote closes
            close = text.find(quote, start, end + 1)
            end = close if close >= 0 else end
        else:
            end = _inside_string_end(text, m.start(), start, end)
    elif quote:  # `curl -u 'bob:secret words'`: the quote opened before the secret closes it
        close = text.find(quote, start, _eol(text, start))
        end = close if close >= 0 else _eol(text, start)
    elif rule.kind == "secret_assignment" and text[m.start("n") - 1:m.start("n")] in ("\"", "'") \
            and not m.groupdict().get("q"):
        # `"X-Api-Key: abc"`: the name opened a string, so the value ends where that string does.
        end = _inside_string_end(text, m.start("n"), start, end)
    if _BLOCK_INDICATOR.match(text, start) and end > _eol(text, start):
        start = _eol(text, start) + 1  # a block scalar: its indicator stays, its lines go
    return start, end


def _inside_string_end(text: str, name_start: int, start: int, end: int) -> int:
    q = text[name_start - 1:name_start]
    if q in ("\"", "'") and text[start:start + 1] != q:
        close = text.find(q, start, end)
        if close >= 0:
            return close
    return end


def _candidates(text: str) -> list[tuple[int, int, int, str]]:
    """(start, end, rule index, name) of every secret any rule finds."""
    found: list[tuple[int, int, int, str]] = []
    lower = text.lower()
    for idx, rule in enumerate(RULES):
        if rule.needles and not any(n in lower for n in rule.needles):
            continue
        covered = -1  # a match starting inside a span this rule already found adds nothing: not scanned again
        for m in rule.pattern.finditer(text):
            if m.start("s") < covered or (rule.check and not rule.check(m)):
                continue
            span = _value_span(text, rule, m)
            if span is not None and (hit := _keep(text, span, m.groupdict().get("n") or "")):
                found.append((*hit, idx, m.groupdict().get("n") or ""))
                covered = max(covered, hit[1])
    for start, end, name in (_netrc(text) if "machine" in text or "default" in text else ()):
        if not harmless(name, text[start:end]):
            found.append((start, end, len(RULES), name))
    return found


def _keep(text: str, span: tuple[int, int], name: str) -> tuple[int, int] | None:
    start, end = span
    value = text[start:end]
    if end <= start or harmless(name, value):
        return None
    if value[0] in "\"'" and len(value) >= 2 and _quoted_end(text, start) == end:
        start, end = start + 1, end - 1  # exactly one quoted string: keep the quotes, the file still parses
    return start, end


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    """Merged (start, end, kind, name): overlapping findings become one span; the earliest rule names its kind."""
    merged: list[list] = []
    for start, end, idx, name in sorted(_candidates(text)):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1:] = max(last[1], end), min(last[2], idx), last[3] or name
        else:
            merged.append([start, end, idx, name])
    return [(s, e, RULES[i].kind if i < len(RULES) else "netrc_password", n) for s, e, i, n in merged]


def _assigned_to(before: str) -> str:
    """The name a value is assigned to, read back from the text before it (`NAME = "`, `NAME: `, `NAME=`)."""
    s = before.rstrip().removesuffix('"').removesuffix("'").rstrip()
    if not s or s[-1] not in "=:":
        return ""
    s = s[:-1].rstrip().removesuffix('"').removesuffix("'")
    j = len(s)
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in "_.-") and len(s) - j < 100:
        j -= 1
    name = s[j:]
    return name if name[:1].isalpha() or name[:1] == "_" else ""


def _mask(secret: str) -> str:
    """The secret's place: each of its lines keeps its indentation and trailing blanks (so line numbers and
    a YAML block's shape survive), its text becomes MASK."""
    return "\n".join(line[:len(line) - len(line.lstrip())] + MASK + line[len(line.rstrip()):] if line.strip()
                     else line for line in secret.split("\n"))


def redact_text(text: str, where: str = "<text>") -> RedactionResult:
    out, pos, found, values = [], 0, [], {}
    line, counted = 1, 0
    for start, end, kind, name in _spans(text):
        out += [text[pos:start], _mask(text[start:end])]
        pos = end
        if not name:  # a token-shaped value: name the variable it was assigned to, if any
            name = _assigned_to(text[max(_line_start(text, start), start - 200):start])
        line += text.count("\n", counted, start)
        counted = start
        found.append(Redaction(kind, where, line, name))
        values[text[start:end]] = name or kind
    out.append(text[pos:])
    return RedactionResult("".join(out), found, values)


# Shorter values would mask half of any log: below 8 characters a value goes only where it stands as a word,
# and one of digits only not at all (it would mask ports, PIDs and counts; such a password protects nothing).
KNOWN_MIN = 4


def scrub_known(text: str, known: dict[str, str], where: str) -> RedactionResult:
    """Every occurrence of a secret value the tool knows (the spec's api_key, a value masked in another file)
    in `text`, whatever surrounds it: `used key Zq8x...` in a log names no variable a rule could see."""
    pattern, names = _known_pattern(tuple(sorted(known.items())))
    if pattern is None:
        return RedactionResult(text, [])
    out, pos, found, line = [], 0, [], 1
    for m in pattern.finditer(text):
        out += [text[pos:m.start()], MASK]
        line += text.count("\n", pos, m.start())
        pos = m.end()
        found.append(Redaction("known_secret", where, line, names.get(m.group(), "")))
    out.append(text[pos:])
    return RedactionResult("".join(out), found)


# A key's BEGIN/END lines are public labels, not its secret: they stay in a log as the sign of what was masked.
_PEM_ARMOR = re.compile(r"-----(?:BEGIN|END) [A-Z0-9 ]+-----")


@lru_cache(maxsize=4)
def _known_pattern(known: tuple[tuple[str, str], ...]) -> tuple[re.Pattern | None, dict[str, str]]:
    """One alternation of every known value (and each line of a multi-line one), longest first."""
    names = {piece.strip(): name for value, name in known for piece in (value, *value.splitlines())
             if len(piece.strip()) >= KNOWN_MIN and MASK not in piece and not _PEM_ARMOR.fullmatch(piece.strip())
             and not (len(piece.strip()) < 8 and piece.strip().isdecimal())}
    ordered = sorted(names, key=lambda v: (-len(v), v))
    long = [re.escape(v) for v in ordered if len(v) >= 8]
    short = [re.escape(v) for v in ordered if len(v) < 8]
    parts = long + ([rf"(?<![\w-])(?:{'|'.join(short)})(?![\w-])"] if short else [])
    return (re.compile("|".join(parts)) if parts else None), names


_STR = "tag:yaml.org,2002:str"


def redact_structure(text: str, where: str) -> RedactionResult:
    """A YAML (or JSON) document redacted from its parsed structure and written back from it: every value under
    a secret name in any layout (on the next line, after a comment, folded over lines, under a `? key`, in JSON
    flow, an alias of a value anchored elsewhere) and whatever `redact_text` finds in any other value. Comments
    and layout are not kept (a comment can hold a secret too). Not YAML: BadInput, and nothing of it is copied."""
    from p2p_ops.spec.strict_yaml import compose

    root = compose(text, where)
    result = RedactionResult("", [])
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            found = redact_text(node.value, where)
            if found.redactions:
                _set(node, found.text)
                result.values.update(found.values)
                result.redactions += [Redaction(r.kind, where, node.start_mark.line + r.line, r.name)
                                      for r in found.redactions]
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else ""
                if is_secret_name(name):
                    _mask_values(value, name, where, result)
                stack += [key, value]
        else:
            stack += node.value
    header = "# written back from the parsed spec with its secrets masked; comments and layout are not kept\n"
    result.text = header + (yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True) if root else "")
    return result


def _mask_values(node: yaml.Node, name: str, where: str, result: RedactionResult) -> None:
    """Every scalar value under a secret name (a mapping's keys stay: they name, they do not unlock)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode) and not harmless(name, node.value):
            result.values[node.value] = name
            result.redactions.append(Redaction("secret_field", where, node.start_mark.line + 1, name))
            _set(node, MASK)
        elif isinstance(node, yaml.MappingNode):
            stack += [value for _, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def _set(node: yaml.ScalarNode, value: str) -> None:
    node.value, node.tag, node.style = value, _STR, None  # a masked 1234 is text now, not an int


def manifest_entries(redactions: list[Redaction]) -> list[dict]:
    """JSON-ready list for a bundle manifest's `redactions` field."""
    return [{"kind": r.kind, "where": r.where, "line": r.line, **({"name": r.name} if r.name else {})}
            for r in redactions]
