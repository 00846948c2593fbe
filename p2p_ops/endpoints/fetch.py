"""HTTP GETs every endpoint reader uses: JSON or text, None when nothing (or no 200) answers.

Requests to an engine carry the fleet's API key (`auth`); nothing else ever sees it.
"""

from __future__ import annotations

from typing import Any, Optional

import requests

from p2p_ops.endpoints import auth

TIMEOUT = 3.0


def get_json(url: str, timeout: float = TIMEOUT) -> Optional[Any]:
    """GET and decode JSON; None when nothing answers or the answer is not a 200 JSON body."""
    try:
        resp = requests.get(url, timeout=timeout, headers=auth.headers(url))
        if resp.status_code != 200:
            return None
        return resp.json()
    except (requests.RequestException, ValueError):
        return None


def post_json(url: str, body: Any, timeout: float = TIMEOUT) -> tuple[int, Optional[Any]]:
    """POST JSON; (status code, decoded body or None). Status 0: nothing answered. For read-only routes only
    (the coordinator's /directory/lookup, an engine's /tokenize): the toolkit never changes a fleet over HTTP."""
    try:
        resp = requests.post(url, json=body, timeout=timeout, headers=auth.headers(url))
    except requests.RequestException:
        return 0, None
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, None


def get_answer(url: str, timeout: float = TIMEOUT) -> tuple[int, Optional[Any]]:
    """GET; (status code, decoded JSON body or None), so a caller can say why a route refused (4xx/5xx)."""
    try:
        resp = requests.get(url, timeout=timeout, headers=auth.headers(url))
    except requests.RequestException:
        return 0, None
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, None


def get_text(url: str, timeout: float = TIMEOUT) -> Optional[str]:
    try:
        resp = requests.get(url, timeout=timeout, headers=auth.headers(url))
        return resp.text if resp.status_code == 200 else None
    except requests.RequestException:
        return None


def answers(url: str, timeout: float = TIMEOUT) -> bool:
    """GET answers 200 (a health or readiness route)."""
    try:
        return requests.get(url, timeout=timeout, headers=auth.headers(url)).status_code == 200
    except requests.RequestException:
        return False
