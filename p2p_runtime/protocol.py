"""OpenAI/vLLM wire schemas: request models and the error body.

Field names follow vLLM's OpenAI-compatible server. Unknown request fields are accepted and
ignored, as vLLM does, so clients that send extra sampling options keep working.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                405: "MethodNotAllowedError", 413: "RequestTooLargeError", 429: "RateLimitError",
                500: "InternalServerError", 503: "ServiceUnavailableError"}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's error shape: the HTTP status doubles as ``code``."""
    # An error may quote the client's text; a lone surrogate in it must not make the error itself fail.
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(_Lenient):
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Accepted for compatibility; decoding is always greedy.
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    user: str | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    # vLLM's default for /v1/completions; chat defaults to "what fits".
    max_tokens: int | None = 16
    echo: bool = False
    logprobs: int | None = None


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class ChatMessage(_Lenient):
    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    add_generation_prompt: bool = True


class TokenizeRequest(_Lenient):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(_Lenient):
    model: str | None = None
    tokens: list[int]
