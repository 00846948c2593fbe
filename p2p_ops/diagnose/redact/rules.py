"""Where a secret starts (`RULES`, `.netrc` entries), and the values that hide nothing (`harmless`: placeholders,
auth modes, SSH public keys): a bundle exists to show them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

from p2p_ops.diagnose.redact.scan import (eol, line_value_end, next_at, query_end, record_end, shell_word_end,
                                          token_end, yaml_value_end)
from p2p_ops.facts.secret_names import is_secret_name, name_parts

# Values of an `*_auth` name that say how one authenticates, not with what.
AUTH_MODES = {"publickey", "password", "keyboard-interactive", "none", "hostbased", "gssapi-with-mic", "basic",
              "bearer", "digest", "token", "kerberos", "negotiate", "ntlm", "oauth", "oauth2", "mtls", "tls",
              "off", "on", "true", "false", "disabled", "enabled", "anonymous", "sasl", "scram-sha-256", "md5",
              "trust", "peer", "ident", "required", "optional"}
# Values that are already placeholders, references or empty are left alone: redacting them hides nothing.
_HARMLESS = re.compile(r"^[\"']?(?:|<redacted>|\*+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]{0,200}>|null|none|None|"
                       r"true|false|True|False|\[\]|\{\}|set \(not shown\))[\"']?$")
_PUBLIC_KEY = re.compile(r"[\"']?(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|sk-[\w-]+@openssh\.com) AAAA")
_PROSE = re.compile(r"[A-Z]?[a-z]+(?:-[a-z]+)*[.-]?")  # "Bearer authentication": a word, not a token

def harmless(name: str, value: str) -> bool:
    """A value that hides nothing: empty, a placeholder or reference, an SSH public key, or an auth mode under an
    `*_auth` or `Authorization` name."""
    if _HARMLESS.match(value[:300]) or _PUBLIC_KEY.match(value):
        return True
    parts = name_parts(name) if name else []
    return bool(parts) and parts[-1] in ("auth", "authorization") and value.strip("\"'").lower() in AUTH_MODES


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
    ("smbclient", r"-U[ \t]*[^%\s]+%"), ("sshpass", r"-p"),
)
_TOOL_SPAN = r"[^\n]{0,400}?(?<=\s)"  # the flag within a bounded stretch of the tool's command line


RULES: tuple[Rule, ...] = (
    # A BEGIN line; its block ends at the next END line (`pem_end`, from an index of END lines).
    Rule("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?P<s>)"), None,
         needles=("private key",)),
    # A block cut off before its END line (truncated log tails) still leaks key material.
    Rule("private_key", re.compile(
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?P<s>(?:\s*(?:\\n)?[A-Za-z0-9+/=:-]{16,})+)"),
        needles=("private key",)),
    *(Rule(kind, re.compile(r"(?<![A-Za-z0-9])(?P<s>" + rx + ")"), token_end, needles=(needle,))
      for kind, rx, needle in _TOKEN_PREFIXES),
    Rule("bearer_token", re.compile(r"(?i)\bBearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), token_end,
         lambda m: not _PROSE.fullmatch(m["s"]), needles=("bearer",)),
    # Any scheme (Basic, Token, Digest, AWS4-HMAC-SHA256, a bare key); the scheme word itself stays.
    Rule("authorization", re.compile(
        r"(?i)\b(?P<n>(?:proxy-)?authorization)[\"']?\s*[:=]\s*(?P<oq>[\"']?)(?:(?:Bearer|Basic|Token|Digest|Negotiate|"
        r"AWS4-HMAC-SHA256)\s+)?(?P<s>\S)"), line_value_end, needles=("authorization",)),
    Rule("cookie", re.compile(r"(?i)\b(?:set-)?cookie[\"']?\s*:\s*(?P<oq>[\"']?)(?P<s>\S)"), line_value_end,
         needles=("cookie",)),
    Rule("url_password", re.compile(
        r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://(?P<u>[^\s:/?#@\"'<>]{0,200}):(?P<s>[^\s/\"'<>]{0,500})@"),
        needles=("://",)),
    # A bare token as the user (`https://ghp_x@github.com`, `https://<40 hex>@host`).
    Rule("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://(?P<s>[A-Za-z0-9_-]{24,500})@"),
         needles=("://",)),
    Rule("url_query_secret", re.compile(r"[?&;]" + _NAME + r"=(?P<s>[^&#\s\"'<>]+)"), query_end,
         lambda m: is_secret_name(m.group("n")) or m.group("n").lower() in {"key", "sig", "code", "signature"},
         needles=("=",)),
    Rule("webhook_url", re.compile(r"(?:hooks\.slack\.com/(?:services|workflows|triggers)"
                                   r"|discord(?:app)?\.com/api/webhooks)/(?P<s>[A-Za-z0-9/_-]+)"), token_end,
         needles=("hooks.slack", "discord")),
    Rule("mysql_password", re.compile(
        rf"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport)\b{_TOOL_SPAN}-p(?P<s>[^\s-])"),
        shell_word_end, needles=("mysql", "mariadb")),
    *(Rule("cli_password", re.compile(rf"\b(?:{tools})\b{_TOOL_SPAN}{flag}[ \t]*(?P<s>[^\s-])"), shell_word_end,
           needles=tuple(t.split("-")[0] for t in tools.split("|"))) for tools, flag in _CLIENT_FLAGS),
    Rule("cli_password", re.compile(rf"\bcurl\b{_TOOL_SPAN}(?:-u|--user)[ \t=]*(?P<oq>[\"']?)[^\s:\"']{{1,200}}:"
                                    r"(?P<s>[^\s\"'])"), shell_word_end, needles=("curl",)),
    Rule("cli_password", re.compile(r"(?<![\w-])-pass(?:in|out)?[ \t]+(?P<oq>[\"']?)pass:(?P<s>[^\s\"'])"),
         shell_word_end, needles=("pass:",)),
    Rule("cli_password", re.compile(r"(?<![\w-])-(?:src|dest|new)?(?:store|key)pass[ \t]+(?P<s>[^\s-])"),
         shell_word_end, needles=("pass",)),
    # An environ record (`/proc/<pid>/environ`, NUL-separated): the value runs to its NUL, spaces included.
    Rule("secret_assignment", re.compile(r"(?:^|(?<=\0))" + _NAME + r"=(?P<s>[^\0\n])"), record_end, _named,
         needles=("\0",)),
    # `NAME=value` starting a line (env output, a .env file): everything to the line's end may be the value.
    Rule("secret_assignment", re.compile(r"(?m)^" + _NAME + r"=(?P<s>[^\s\"'=])"), line_value_end, _named,
         needles=("=",)),
    # NAME=value (shell/env/INI); `NAME = value` (INI/TOML, spaces allowed in the value) reads to the line end.
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)=(?P<s>[^\s=])"), shell_word_end, _named,
         needles=("=",)),
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)[ \t]+=[ \t]*(?P<s>\S)"), line_value_end,
         _named, needles=("=",)),
    # NAME: value (YAML incl. block scalars, JSON, Python reprs, headers; a full-width colon too).
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"(?P<q>[\"']?)[ \t]*[:：][ \t]*(?P<s>\S)"), yaml_value_end,
         _named, needles=(":", "：")),
    # NAME<tab>value (a table, TSV): the value is its cell.
    Rule("secret_assignment", re.compile(_FREE + _NAME + r"[ ]*\t[ \t]*(?P<s>\S)"),
         lambda text, i: min(next_at(text, "\t", i), eol(text, i)), _named, needles=("\t",)),
    # `aws configure set NAME value`, `git config --global NAME value`.
    Rule("secret_assignment", re.compile(r"\bconfig(?:ure)?(?:[ \t]+(?:set|--[\w-]+))*[ \t]+" + _NAME +
                                         r"[ \t]+(?P<s>[^\s-])"), shell_word_end, _named, needles=("config",)),
    # A flag's value: `--flag value`, `--flag=value`, an argv whose items NULs or newlines separate (a YAML block
    # list's too), a JSON or Python list (`"--api-key", "S"`).
    Rule("secret_flag", re.compile(r"(?<![\w-])--(?P<n>[A-Za-z0-9][A-Za-z0-9_-]{0,100})(?:=|[ \t]+|\0|"
                                   r"\n(?:[ \t]*-[ \t]+)?|[\"'],\s{0,200}(?P<oq>[\"']))(?P<s>[^\s-])"),
         shell_word_end, _named, needles=("--",)),
)
# .netrc: `machine HOST login USER password SECRET` over one line or several.
_NETRC_ENTRY = re.compile(r"(?m)^[ \t]*(?:machine[ \t]+\S|default\b)")
_NETRC_TOKEN = re.compile(r"\S+")


def netrc(text: str) -> Iterator[tuple[int, int, str]]:
    for entry in _NETRC_ENTRY.finditer(text):
        previous = ""
        for n, tok in enumerate(_NETRC_TOKEN.finditer(text, entry.start())):
            word = tok.group()
            if n and word in ("machine", "default") or n > 64:
                break
            if previous in ("password", "passwd", "account"):
                yield tok.start(), tok.end(), previous
            previous = word if previous not in ("password", "passwd", "account") else ""

