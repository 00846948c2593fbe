"""What vllm-router says over HTTP: `/health`, and `/workers` (every worker URL with its health flag)."""

from __future__ import annotations

from typing import Any, Optional

from p2p_ops.endpoints import fetch


def parse_workers(body: Any) -> dict[str, bool]:
    """`{"workers": [{"url": ..., "is_healthy": ...}, ...]}` -> {worker url: healthy}."""
    if not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        return {}
    return {str(w.get("url", "")).rstrip("/"): bool(w.get("is_healthy")) for w in body["workers"]
            if isinstance(w, dict)}


def workers(url: str, timeout: float = fetch.TIMEOUT) -> Optional[dict[str, bool]]:
    body = fetch.get_json(url.rstrip("/") + "/workers", timeout=timeout)
    return None if body is None else parse_workers(body)
