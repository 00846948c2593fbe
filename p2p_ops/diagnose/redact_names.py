"""Which names hold secrets, and which of the toolkit's own diagnostic names and values never do.

`is_secret_name("DB_PASSWORD")` is True; so are names glued to a prefix without a separator, as some database
clients spell theirs (`PGPASSWORD`, `MYSQLPASSWORD`). A bundle exists to show cache and chunk keys, hashes,
GIDs, auth modes and the toolkit's "set (not shown)": those names (`DIAGNOSTIC_KEYS`) and values
(`AUTH_MODES`, `harmless`) must survive redaction unchanged.
"""

from __future__ import annotations

import re
from functools import lru_cache

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
