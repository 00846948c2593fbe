"""API keys by endpoint: every HTTP client of the toolkit asks here which headers an engine URL needs.

A fleet with `api_key` registers it for each of its engine URLs when it is loaded; readiness, the test harness,
the monitor and the doctor then send `Authorization: Bearer <key>` to those engines (and only to them: the
lmcache servers, the coordinator and Prometheus never see it).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_keys: dict[str, str] = {}  # normalised engine base URL -> key


def _base(url: str) -> str:
    # "http://127.0.0.1:8000/v1/completions" and "http://127.0.0.1:8000/" share the key of the base URL.
    scheme, sep, rest = url.partition("://")
    return (scheme + sep + rest.split("/", 1)[0]).lower()


def register(engine_url: str, key: str) -> None:
    if key:
        with _lock:
            _keys[_base(engine_url)] = key


def headers(url: str) -> dict[str, str]:
    """The headers a request to `url` needs (empty unless a key is registered for that engine)."""
    key = _keys.get(_base(url))
    return {"Authorization": f"Bearer {key}"} if key else {}
