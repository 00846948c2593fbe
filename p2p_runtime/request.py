"""A generation request as the scheduler and runner see it, and the events it emits.

The HTTP layer creates a :class:`Request`, hands it to the scheduler and reads :class:`Event`s
from its ``on_event`` callback (called on the worker thread). Once the ``finish`` or ``error``
event is out, the worker no longer touches the request, so the HTTP layer may read its fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
import time


@dataclass(frozen=True)
class Event:
    """``delta`` (new text), ``finish`` (done, see the request's fields) or ``error``."""

    kind: str
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    on_event: Callable[[Event], None] = lambda event: None
    arrival: float = field(default_factory=time.monotonic)

    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    sent_chars: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    aborted: bool = False
    # Set by the runner: the LMCache session (named after request_id) needs an END_SESSION.
    lmcache_session_used: bool = False
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
