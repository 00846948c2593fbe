"""Which names hold secrets (`DB_PASSWORD`, glued `PGPASSWORD`; not `cache_key`, `max_tokens`, `password_policy`):
the one classifier for env.sh diffs, baselines and redaction."""

from __future__ import annotations

import re
from functools import lru_cache

_LAST_WORDS = {"password", "passwd", "passphrase", "pass", "secret", "secrets", "token", "credential",
               "credentials", "apikey", "accesskey", "accountkey", "privatekey", "auth", "authorization",
               "cookie", "pwd", "key", "json", "sig", "signature", "headers"}
# Bare `PWD` is the shell's working directory, a bare `key`/`json`/`sig` usually a cache key or a config blob and
# bare `headers` a log's word: these count only after a prefix (MYSQL_PWD, API_KEY, OTLP_HEADERS).
_NEEDS_PREFIX = {"pwd", "key", "json", "sig", "signature", "headers"}
_ANYWHERE = {"secret", "password", "passwd", "passphrase"}
# Long enough not to end an ordinary word: `PGPASSWORD` is a secret, `bypass` and `compass` are not.
_GLUED = re.compile(r".(?:password|passwd|passphrase|secret|apikey|accesstoken|authtoken|privatekey)$")
# Tokenizer settings (`eos_token: "</s>"`), per-token rates (`prefill_us_per_token`), header counts.
_NOT_SECRET_BEFORE = {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "per", "max", "num", "first", "last", "next",
                      "end", "start", "special", "prompt", "cached", "hit"}
# What a name about a secret is, when it is not the secret itself: `password_policy`, `secret_sharing_mode`.
_ABOUT_A_SECRET = {"policy", "file", "path", "length", "min", "max", "rules", "prompt", "mode", "enabled",
                   "disabled", "type", "kind", "count", "size", "dir", "name", "names", "format", "version", "ttl"}
# `<word>_key` names that identify data, never unlock anything (LMCache's cache, chunk and object keys, routing
# keys, `--block-hash-key`, a GID table's key, an SSH public key).
DIAGNOSTIC_KEYS = {"cache", "chunk", "object", "prefix", "routing", "hash", "gid", "lookup", "partition", "shard",
                   "sort", "primary", "foreign", "index", "block", "kv", "event", "metric", "label", "group",
                   "dict", "map", "dedup", "bucket", "row", "column", "public", "affinity"}
# LMCache's own `storage_key`, `model_key`, ... name data only when they stand alone: `AZURE_STORAGE_KEY` unlocks.
_BARE_DATA_KEYS = {"tokenizer", "model", "instance", "storage", "request"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_parts(name: str) -> list[str]:
    return [p for p in re.split(r"[_.\-\s]+", _CAMEL.sub("_", name.strip("-_.")).lower()) if p]


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag of this name holds a secret (cached: a log repeats its names)."""
    parts = name_parts(name[:200]) or [""]
    last = parts[-1]
    if last == "id" and len(parts) >= 3 and parts[-2] == "key":  # private_key_id, AWS_ACCESS_KEY_ID
        return True
    if last in {"token", "tokens", "headers"} and len(parts) >= 2 and parts[-2] in _NOT_SECRET_BEFORE:
        return False
    if last == "key" and len(parts) >= 2 and (parts[-2] in DIAGNOSTIC_KEYS or parts == [parts[0], "key"]
                                               and parts[0] in _BARE_DATA_KEYS):
        return False
    if last in _LAST_WORDS:
        return len(parts) > 1 or last not in _NEEDS_PREFIX
    if _GLUED.search(last):
        return True
    return any(p in _ANYWHERE for p in parts[:-1]) and last not in _ABOUT_A_SECRET
