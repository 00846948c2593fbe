"""HTTP GETs every endpoint reader uses: JSON or text, None when nothing (or no 200) answers.

Requests to an engine carry the fleet's API key (`auth`); nothing else ever sees it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import requests

from p2p_ops import files
from p2p_ops.endpoints import auth
from p2p_ops.errors import BadInput

TIMEOUT = 3.0


def _request(send: Callable[..., requests.Response], url: str, timeout: float, **kw: Any
             ) -> Optional[requests.Response]:
    try:
        return send(url, timeout=timeout, headers=auth.headers(url), **kw)
    except requests.RequestException:
        return None


def _answer(resp: Optional[requests.Response]) -> tuple[int, Optional[Any]]:
    """A body that is not JSON, or JSON nested past `files.JSON_DEPTH` (a crafted answer), decodes to None."""
    if resp is None:
        return 0, None
    try:
        return resp.status_code, files.parse_json(resp.text, resp.url)
    except BadInput:
        return resp.status_code, None


def get_answer(url: str, timeout: float = TIMEOUT) -> tuple[int, Optional[Any]]:
    """GET; (status code, decoded JSON body or None), so a caller can say why a route refused (4xx/5xx).
    Status 0: nothing answered."""
    return _answer(_request(requests.get, url, timeout))


def get_json(url: str, timeout: float = TIMEOUT) -> Optional[Any]:
    code, body = get_answer(url, timeout)
    return body if code == 200 else None


def post_json(url: str, body: Any, timeout: float = TIMEOUT) -> tuple[int, Optional[Any]]:
    """POST JSON, answered as `get_answer`. For read-only routes only (the coordinator's /directory/lookup, an
    engine's /tokenize): the toolkit never changes a fleet over HTTP."""
    return _answer(_request(requests.post, url, timeout, json=body))


def get_text(url: str, timeout: float = TIMEOUT) -> Optional[str]:
    resp = _request(requests.get, url, timeout)
    return resp.text if resp is not None and resp.status_code == 200 else None


def answers(url: str, timeout: float = TIMEOUT) -> bool:
    resp = _request(requests.get, url, timeout)
    return resp is not None and resp.status_code == 200
