"""FastAPI app speaking vLLM's OpenAI-compatible API on top of an :class:`EngineCore`.

Routes: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions`` (SSE streaming or not), ``/tokenize``,
``/detokenize``, ``/health``, ``/metrics``, ``/version``, vLLM's ops routes and the KV-event discovery routes. Every
client mistake is a 4xx with an OpenAI-style error body; nothing ever answers with a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
import importlib.metadata
import json
import logging
import time
from typing import Any
import uuid

from fastapi import FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from p2p_runtime import protocol as p
from p2p_runtime.core import EngineCore
from p2p_runtime.limits import RequestLimits
from p2p_runtime.metrics import CONTENT_TYPE
from p2p_runtime.scheduler import EngineStopped, Event, Request
from p2p_runtime.tokenizer import ChatTemplateError, message_text, render_chat

logger = logging.getLogger(__name__)

# How often a waiting request checks that the worker thread is still alive.
_WORKER_CHECK_S = 5.0
# What a 429 asks the client to wait: about one request's worth of work on this tiny engine.
_RETRY_AFTER_S = 1

try:
    VERSION = importlib.metadata.version("p2p-kv-ops")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    VERSION = "0+unknown"


def create_app(core: EngineCore) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        # start() may wait on a slow LMCache server; keep the event loop free meanwhile.
        await asyncio.to_thread(core.start)
        try:
            yield
        finally:
            await asyncio.to_thread(core.stop)

    app = FastAPI(title="p2p-engine", version=VERSION, lifespan=lifespan)
    app.state.core = core
    app.add_middleware(RequestLimits, max_body_bytes=core.config.max_body_bytes, api_key=core.config.api_key)

    @app.exception_handler(p.ApiError)
    async def api_error(_: HttpRequest, exc: p.ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: HttpRequest, exc: RequestValidationError) -> JSONResponse:
        # FastAPI says 422; vLLM and OpenAI say 400 with one readable message.
        first = exc.errors()[0] if exc.errors() else {}
        # The request field, without pydantic's union-member tags.
        param = ".".join(str(x) for x in first.get("loc", ())[1:] if isinstance(x, int) or (
            x.isidentifier() and x not in ("str", "int", "float", "bool"))) or None
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            message, param = "request body is not valid JSON", None
        elif first.get("type") in ("model_attributes_type", "dict_type") and not param:
            message = "request body must be a JSON object"
        elif param:
            message = f"{param}: {message}"
        return _error(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: HttpRequest, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RecursionError)
    async def too_deep(_: HttpRequest, exc: RecursionError) -> JSONResponse:
        return _error(400, "request body is nested too deeply")

    @app.exception_handler(Exception)
    async def unexpected(_: HttpRequest, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error: %s", exc)
        return _error(500, f"internal error: {type(exc).__name__}")

    handler = _Handlers(core)
    app.get("/health")(handler.health)
    app.get("/version")(lambda: {"version": VERSION})
    app.get("/metrics")(handler.metrics)
    # vLLM's ops routes for load balancers and benchmarks (tools call them on either engine). /ping is /health
    # under another name (SageMaker-style probes); this engine keeps no local prefix cache (every reuse goes
    # through LMCache), so /reset_prefix_cache has nothing to drop but answers as vLLM does.
    app.get("/ping")(handler.health)
    app.post("/ping")(handler.health)
    app.post("/reset_prefix_cache")(lambda: Response(status_code=200))
    app.get("/v1/models")(handler.models)
    app.post("/tokenize")(handler.tokenize)
    app.post("/detokenize")(handler.detokenize)
    app.post("/v1/completions")(handler.completions)
    app.post("/v1/chat/completions")(handler.chat_completions)
    # vllm-router's kv_aware policy, given no static --kv-event-source, asks every worker for /get_server_info
    # (what its block keys depend on) and /kv_event_sources (the publisher of each data-parallel rank, keyed as
    # vLLM's get_kv_event_sources()). Without events both are 404, as in vLLM.
    app.get("/get_server_info")(handler.server_info)
    app.get("/kv_event_sources")(handler.kv_event_sources)
    return app


def _error(status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(p.error_body(status, message, param), status_code=status, headers=headers)


class _EventBridge:
    def __init__(self, core: EngineCore) -> None:
        self._loop = asyncio.get_running_loop()
        self._core = core
        self._queue: asyncio.Queue[Event] = asyncio.Queue()

    def push(self, event: Event) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:
            pass  # the loop is gone (shutdown); nobody is listening any more

    async def next(self) -> Event:
        while True:
            try:
                return await asyncio.wait_for(self._queue.get(), timeout=_WORKER_CHECK_S)
            except asyncio.TimeoutError:
                if not self._core.scheduler.alive:
                    return Event("error", error="engine worker is not running")


class _Handlers:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.cfg = core.config
        self.model_name = core.config.served_model_name

    async def health(self) -> Response:
        """200 while the engine serves. Without its lmcache server it still serves (recomputing every
        prefix), so that is 200 too, but the body says `degraded` and why: `p2pctl status` shows it."""
        if not self.core.scheduler.alive:
            raise p.ApiError(503, "engine worker is not running")
        state = self.core.lmcache_state
        if state == "disconnected":
            return JSONResponse({"status": "degraded", "lmcache": state,
                                 "detail": f"lmcache server {self.cfg.lmcache_url} is unreachable; serving "
                                           "without the cache (recompute) and reconnecting"})
        return JSONResponse({"status": "ok", "lmcache": state})

    async def metrics(self) -> Response:
        return Response(self.core.metrics.render(), media_type=CONTENT_TYPE)

    async def server_info(self) -> JSONResponse:
        return self._kv_events_off() or JSONResponse({
            "model_id": self.model_name, "instance_id": self.cfg.label, "kv_block_size": self.cfg.block_size})

    async def kv_event_sources(self) -> JSONResponse:
        return self._kv_events_off() or JSONResponse({"0": asdict(self.cfg.kv_events)})

    def _kv_events_off(self) -> JSONResponse | None:
        if not self.cfg.kv_events.active:
            return JSONResponse({"object": "error", "type": "NotFoundError", "code": 404,
                                 "message": "KV events are off; start the engine with --kv-events-config"},
                                status_code=404)
        return None

    async def models(self) -> dict[str, Any]:
        card = {"id": self.model_name, "object": "model", "created": int(time.time()),
                "owned_by": "p2p-runtime", "root": self.model_name, "parent": None,
                "max_model_len": self.cfg.max_model_len, "permission": []}
        return {"object": "list", "data": [card]}

    async def tokenize(self, body: p.TokenizeRequest) -> dict[str, Any]:
        self._check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise p.ApiError(400, "give exactly one of prompt or messages", "prompt")
        if body.messages is not None:
            ids = self._chat_ids(body.messages, body.add_generation_prompt)
        else:
            self._check_text_length(len(body.prompt), "prompt")
            ids = self.core.tokenizer.encode(body.prompt, add_bos=body.add_special_tokens)
        return {"count": len(ids), "max_model_len": self.cfg.max_model_len, "tokens": ids, "token_strs": None}

    async def detokenize(self, body: p.DetokenizeRequest) -> dict[str, Any]:
        self._check_model(body.model)
        self._check_ids(body.tokens, "tokens")
        return {"prompt": self.core.tokenizer.decode(body.tokens)}

    async def completions(self, body: p.CompletionRequest) -> Response:
        self._check_common(body)
        if body.echo:
            raise p.ApiError(400, "echo is not supported by this engine", "echo")
        if body.logprobs is not None:
            raise p.ApiError(400, "logprobs are not supported by this engine", "logprobs")
        ids = self._completion_ids(body.prompt)
        return await self._respond(self._make_request("cmpl", ids, body.max_tokens, body), body, chat=False)

    async def chat_completions(self, body: p.ChatCompletionRequest) -> Response:
        self._check_common(body)
        if body.logprobs:
            raise p.ApiError(400, "logprobs are not supported by this engine", "logprobs")
        ids = self._chat_ids(body.messages, body.add_generation_prompt)
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        return await self._respond(self._make_request("chatcmpl", ids, max_tokens, body), body, chat=True)

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise p.ApiError(404, f"The model `{model}` does not exist.", "model")

    def _check_common(self, body: p.SamplingFields) -> None:
        self._check_model(body.model)
        if body.n != 1:
            raise p.ApiError(400, f"n must be 1 (greedy decoding), got {body.n}", "n")

    def _check_ids(self, ids: list[int], param: str) -> None:
        bad = next((t for t in ids if not 0 <= t < self.cfg.vocab_size), None)
        if bad is not None:
            raise p.ApiError(400, f"token id {bad} is outside the vocabulary [0, {self.cfg.vocab_size})", param)

    def _completion_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise p.ApiError(400, "batched prompts are not supported; send one prompt per request", "prompt")
            prompt = prompt[0]
        if isinstance(prompt, str):
            self._check_text_length(len(prompt), "prompt")
            return self.core.tokenizer.encode(prompt, add_bos=True)
        if not prompt:
            raise p.ApiError(400, "prompt must not be empty", "prompt")
        self._check_ids(prompt, "prompt")
        return list(prompt)

    def _chat_ids(self, messages: list[p.ChatMessage], add_generation_prompt: bool) -> list[int]:
        try:
            pairs = [(m.role, message_text(m.content)) for m in messages]
        except ChatTemplateError as exc:
            raise p.ApiError(400, str(exc), "messages") from None
        self._check_text_length(sum(len(text) for _, text in pairs), "messages")
        return self.core.tokenizer.encode(render_chat(pairs, add_generation_prompt), add_bos=True)

    def _check_text_length(self, chars: int, param: str) -> None:
        """Refuse before tokenizing: every character is at least one token of this byte-level tokenizer, so a
        text longer than the context in characters can never fit (and tokenizing it would cost memory)."""
        if chars > self.cfg.max_model_len:
            raise self._too_long(f"your {param} has at least {chars} tokens ({chars} characters)", param, param)

    def _too_long(self, however: str, reduce: str, param: str) -> p.ApiError:
        """vLLM's words for a request that does not fit the context."""
        return p.ApiError(400, f"This model's maximum context length is {self.cfg.max_model_len} tokens. However, "
                          f"{however}. Please reduce the length of the {reduce}.", param)

    def _make_request(self, id_prefix: str, ids: list[int], max_tokens: int | None, body: p.SamplingFields) -> Request:
        if max_tokens is None:
            max_tokens = self.cfg.max_model_len - len(ids)
            if max_tokens < 1:
                raise self._too_long(f"your prompt has {len(ids)} tokens", "prompt", "messages")
        if max_tokens < 1:
            raise p.ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if len(ids) + max_tokens > self.cfg.max_model_len:
            raise self._too_long(f"you requested {len(ids) + max_tokens} tokens ({len(ids)} in the messages, "
                                 f"{max_tokens} in the completion)", "messages or completion", "max_tokens")
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        return Request(request_id=f"{id_prefix}-{uuid.uuid4().hex}", prompt_ids=ids, max_tokens=max_tokens,
                       ignore_eos=body.ignore_eos, stop=tuple(s for s in stop if s))

    async def _respond(self, req: Request, body: p.SamplingFields, chat: bool) -> Response:
        if self.core.scheduler.num_waiting >= self.cfg.max_queued:
            raise p.ApiError(429, f"{self.cfg.max_queued} requests are already waiting; retry later",
                             headers={"Retry-After": str(_RETRY_AFTER_S)})
        bridge = _EventBridge(self.core)
        req.on_event = bridge.push
        try:
            self.core.scheduler.submit(req)
        except EngineStopped as exc:
            raise p.ApiError(503, str(exc)) from None
        if body.stream:
            opts = body.stream_options or p.StreamOptions()
            return StreamingResponse(self._sse(req, bridge, chat, opts.include_usage), media_type="text/event-stream")
        parts: list[str] = []
        try:
            while (event := await bridge.next()).kind == "delta":
                parts.append(event.text)
        finally:
            if not req.finished:
                self.core.scheduler.abort(req)
        if event.kind != "finish":
            raise p.ApiError(500, event.error or "generation failed")
        text, obj = "".join(parts), "chat.completion" if chat else "text_completion"
        content = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": req.finish_reason, "stop_reason": None}
        return JSONResponse({**_envelope(req.request_id, obj, int(time.time()), self.model_name, [choice]),
                             "usage": _usage(req)})

    async def _sse(self, req: Request, bridge: _EventBridge, chat: bool, include_usage: bool) -> AsyncIterator[str]:
        created, obj = int(time.time()), "chat.completion.chunk" if chat else "text_completion"
        rid, name = req.request_id, self.model_name

        def chunk(text: str | None, finish: str | None, first: bool = False) -> str:
            if chat:
                delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish,
                          "stop_reason": None}
            data = _envelope(rid, obj, created, name, [choice])
            return _sse({**data, "usage": None} if include_usage else data)

        try:
            if chat:
                yield chunk(None, None, first=True)
            while (event := await bridge.next()).kind == "delta":
                yield chunk(event.text, None)
            if event.kind == "finish":
                yield chunk(None, event.finish_reason)
                if include_usage:  # the last chunk: no choices, just usage
                    yield _sse({**_envelope(rid, obj, created, name, []), "usage": _usage(req)})
            else:
                yield _sse(p.error_body(500, event.error or "generation failed"))
            yield "data: [DONE]\n\n"
        finally:
            # Reached early when the client disconnects: free the request's KV blocks.
            if not req.finished:
                self.core.scheduler.abort(req)


def _envelope(rid: str, obj: str, created: int, model: str, choices: list[dict]) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _usage(req: Request) -> dict[str, Any]:
    prompt, completion = req.num_prompt_tokens, len(req.output_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": req.cached_tokens}}
