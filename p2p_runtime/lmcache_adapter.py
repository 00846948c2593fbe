"""The only module that touches LMCache internals (lmcache 0.5.6 multiprocess protocol).

The engine talks to its local ``lmcache server`` the way vLLM's LMCacheMPConnector does in
engine-driven CPU mode: it registers its paged KV tensors, then per request looks up the prompt's
full chunks, retrieves the hits into its own blocks, and stores newly computed chunks. Whether a
hit came from the local L1 or was pulled from a peer over P2P is the server's business.

Failure policy (vLLM's ``kv_load_failure_policy=recompute``): every operation raises
:class:`LMCacheError` instead of hanging; the engine then recomputes. An unanswered RPC retires the
connection, and a background thread reconnects and re-registers, so a restarted server is picked up
again without restarting the engine. A new LMCache version should only need changes here.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
import functools
import logging
import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import torch

from p2p_runtime.kv_cache import scatter

logger = logging.getLogger(__name__)

# How the engine waits for a lookup's prefetch (which includes any P2P pull into the server's L1): "poll" asks
# QUERY_PREFETCH_STATUS with backoff; "wait" sends one WAIT_PREFETCH_STATUS that the server answers as soon as the
# result is published (LMCache's SGLang adapter does this). "wait" holds one of the server's BLOCKING worker threads,
# the pool that also answers peers' p2p_lookup_and_lock: with --max-workers 1 two servers pulling from each other stall
# until the wait slice ends. bench/suite/kv_path.py measured no clear gain on a 2-core box, so "poll" stays default.
LOOKUP_WAIT_MODES = ("wait", "poll")
# Short first poll, then back off: local hits finish in ~1-5 ms, P2P pulls in tens of ms.
_POLL_FIRST_S = 0.002
_POLL_MAX_S = 0.02
# One server-side wait is capped so a worker thread of a server with few workers is never held long.
_WAIT_SLICE_S = 0.5
# Best-effort cleanup RPCs (unregister, end_session after a failure) must not stall anything.
_CLEANUP_TIMEOUT_S = 0.5


class LMCacheError(RuntimeError):
    """An LMCache operation failed; the caller falls back to recomputing. ``reason``: unavailable (not
    connected), timeout, prefetch_timeout (lookup still running at the deadline), failed (the server answered
    no), mismatch (chunk size) or error (an unexpected exception)."""

    def __init__(self, op: str, reason: str, detail: str = "") -> None:
        super().__init__(f"LMCache {op} {reason}" + (f": {detail}" if detail else ""))
        self.op, self.reason = op, reason


@dataclass(frozen=True)
class KVRegistration:
    model_name: str
    tensors: dict[str, torch.Tensor]
    num_layers: int
    block_size: int
    worker_id: int


@dataclass
class _Connection:
    request_client: Any
    transfer_context: Any
    chunk_size: int
    # "shm" when the server offers a shared-memory pool (``--shm-name``), else "pickle".
    transport: str


class LMCacheAdapter:
    """The KV operations are meant for a single worker thread; connecting runs on a background thread, which
    only ever swaps a finished connection in."""

    def __init__(self, url: str, registration: KVRegistration, timeout_s: float = 2.0,
                 reconnect_interval_s: float = 2.0, lookup_wait: str = "poll") -> None:
        if lookup_wait not in LOOKUP_WAIT_MODES:
            raise ValueError(f"lookup_wait {lookup_wait!r}: use one of {', '.join(LOOKUP_WAIT_MODES)}")
        self.lookup_wait = lookup_wait
        # Stage timings of the last lookup/retrieve (seconds), for benchmarks and debug logs.
        self.last_timings: dict[str, float] = {}
        self.url = url
        self.reg = registration
        self.timeout_s = timeout_s
        self.reconnect_interval_s = reconnect_interval_s
        self.chunk_size: int | None = None
        self._lm = _import_lmcache()
        self._zmq_ctx = _zmq_context(self._lm)
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._retired: list[_Connection] = []
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_connect_error: str | None = None
        self.on_state_change = lambda connected: None

    def start(self, chunk_size: int) -> bool:
        """Connect and register now if possible (whether that worked), then keep reconnecting in the background;
        a server with another chunk size is refused."""
        self.chunk_size = chunk_size
        connected = self._try_connect()
        self._thread = threading.Thread(target=self._reconnect_loop, name="lmcache-reconnect", daemon=True)
        self._thread.start()
        return connected

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 2 * _CLEANUP_TIMEOUT_S + 1)
        with self._lock:
            conns, self._conn = [*self._retired, *([self._conn] if self._conn else [])], None
            self._retired = []
        for conn in conns:
            self._dispose(conn)
        _term_context(self._zmq_ctx)

    def lookup(self, session: str, token_ids: list[int], max_chunks: int) -> int:
        """How many leading chunks (at most ``max_chunks``) LMCache can serve; the server read-locks the hits
        until :meth:`retrieve` reads them (or the lock TTL ends)."""
        conn = self._require("lookup")
        key = self._key(token_ids, 0, max_chunks * conn.chunk_size, session, None)
        started = time.monotonic()
        self._call(conn, "lookup", lambda: conn.request_client.lookup(key, 1))
        submitted = time.monotonic()
        hits, rpcs = self._wait_prefetch(conn, session, submitted + self.timeout_s)
        done = time.monotonic()
        self.last_timings = {"lookup_submit": submitted - started, "lookup_wait": done - submitted,
                             "lookup_rpcs": float(rpcs)}
        logger.debug("%s: lookup %d/%d chunks in %.1f ms (%s, %d status RPCs)", session, hits,
                     max_chunks, (done - started) * 1e3, self.lookup_wait, rpcs)
        return min(hits, max_chunks)

    def _wait_prefetch(self, conn: _Connection, session: str, deadline: float) -> tuple[int, int]:
        poll = self.lookup_wait == "poll"
        delay, rpcs = _POLL_FIRST_S, 0
        while True:
            # Half the RPC timeout at most, so a slow answer is never taken for a dead server.
            wait = min(deadline - time.monotonic(), _WAIT_SLICE_S, self.timeout_s / 2)
            rc = conn.request_client
            hits = self._call(conn, "lookup", (lambda: rc.query_prefetch_status(session)) if poll or wait <= 0
                              else lambda: rc.wait_prefetch_status(session, wait))
            rpcs += 1
            if hits is not None:
                return int(hits), rpcs
            if time.monotonic() + (delay if poll else 0) > deadline:
                raise LMCacheError("lookup", "prefetch_timeout", f"no result within {self.timeout_s:.1f}s")
            if poll:
                time.sleep(delay)
                delay = min(delay * 2, _POLL_MAX_S)

    def retrieve(self, session: str, token_ids: list[int], num_chunks: int, block_ids: list[int]) -> None:
        conn = self._require("retrieve")
        end = num_chunks * conn.chunk_size
        key = self._key(token_ids, 0, end, session, 0)
        started = time.monotonic()
        ok = self._transfer(conn, "retrieve", lambda: _done(self._load(conn, key, block_ids)))
        self.last_timings["retrieve"] = time.monotonic() - started
        logger.debug("%s: retrieved %d tokens in %.1f ms (%s)", session, end,
                     self.last_timings["retrieve"] * 1e3, conn.transport)
        if not ok:
            raise LMCacheError("retrieve", "failed", f"server returned no data for {end} tokens")

    def _load(self, conn: _Connection, key: Any, block_ids: list[int]) -> bool:
        """EngineDrivenTransferContext.submit_retrieve with our own copy into the paged blocks (`kv_cache.scatter`);
        errors are handled as LMCache's are: logged, and the retrieve fails."""
        ctx = conn.transfer_context.engine_driven_context
        chunks = ctx.prepare_retrieve(key, self.reg.worker_id)
        if chunks is None:
            return False
        try:
            scatter(self.reg.tensors, chunks, block_ids, self.reg.block_size)
            return True
        except (RuntimeError, ValueError, IndexError):
            logger.exception("copying retrieved chunks into the paged KV failed")
            return False
        finally:
            ctx.commit_retrieve(key, self.reg.worker_id)

    def store(self, session: str, token_ids: list[int], start_chunk: int, end_chunk: int, block_ids: list[int]) -> None:
        conn = self._require("store")
        cs = conn.chunk_size
        key = self._key(token_ids, start_chunk * cs, end_chunk * cs, session, 0)
        ok = self._transfer(conn, "store", lambda: conn.transfer_context.submit_store(
            session, key, self.reg.tensors, [block_ids], None, cs // self.reg.block_size))
        if not ok:
            # Most likely a restarted server that no longer knows our registration.
            self._retire(conn, "refused a store; re-registering")
            raise LMCacheError("store", "failed", "server refused the chunks")

    def end_session(self, session: str) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.request_client.end_session(session).result(timeout=_CLEANUP_TIMEOUT_S)
        except Exception as exc:  # cleanup must never fail a request
            logger.debug("LMCache end_session failed: %r", exc)

    def _key(self, token_ids: list[int], start: int, end: int, session: str, worker_id: int | None) -> Any:
        return self._lm.IPCCacheServerKey(
            model_name=self.reg.model_name, world_size=1, num_kv_readers=1, worker_id=worker_id,
            token_ids=tuple(token_ids[:end]), start=start, end=end, request_id=session)

    def _require(self, op: str) -> _Connection:
        conn = self._conn
        if conn is None:
            raise LMCacheError(op, "unavailable", f"not connected to {self.url}")
        return conn

    def _call(self, conn: _Connection, op: str, rpc) -> Any:
        try:
            return rpc().result(timeout=self.timeout_s)
        except TimeoutError:
            self._retire(conn, "stopped answering")
            raise LMCacheError(op, "timeout", f"no answer within {self.timeout_s:.1f}s") from None
        except Exception as exc:  # the transport surfaces server-side failures as exceptions
            self._retire(conn, f"failed a {op} ({exc!r})")
            raise LMCacheError(op, "error", repr(exc)) from exc

    def _transfer(self, conn: _Connection, op: str, submit) -> bool:
        # The engine-driven context turns RPC timeouts into ``False``; time it to tell them apart.
        started = time.monotonic()
        ok = bool(self._call(conn, op, submit))
        if not ok and time.monotonic() - started >= self.timeout_s:
            self._retire(conn, "stopped answering")
            raise LMCacheError(op, "timeout", f"no answer within {self.timeout_s:.1f}s")
        return ok

    def _retire(self, conn: _Connection, why: str) -> None:
        # The reconnect thread disposes of it and connects anew.
        with self._lock:
            if self._conn is not conn:
                return
            self._conn = None
            self._retired.append(conn)
        logger.warning("LMCache server %s %s; running as a plain engine until it is back "
                       "(retry every %.1fs)", self.url, why, self.reconnect_interval_s)
        self.on_state_change(False)
        self._wake.set()

    def _try_connect(self) -> bool:
        try:
            conn = self._connect()
        except LMCacheError as exc:
            # Warn once per distinct reason; retries every few seconds would flood the log.
            log = logger.warning if str(exc) != self._last_connect_error else logger.debug
            self._last_connect_error = str(exc)
            log("LMCache connect to %s failed: %s", self.url, exc)
            return False
        self._last_connect_error = None
        with self._lock:
            if self._closed.is_set():
                self._retired.append(conn)
                return False
            self._conn = conn
        logger.info("LMCache connected: %s (chunk_size=%d, transport=%s, worker_id=%d, model=%s)",
                    self.url, conn.chunk_size, conn.transport, self.reg.worker_id,
                    self.reg.model_name)
        self.on_state_change(True)
        return True

    def _connect(self) -> _Connection:
        lm = self._lm
        rc = lm.RequestClientFactory.create(self.url, context=self._zmq_ctx)
        try:
            try:
                cs = int(rc.get_chunk_size().result(timeout=self.timeout_s))
            except TimeoutError:
                raise LMCacheError("connect", "timeout", "server did not answer") from None
            if cs != self.chunk_size:
                # In a fleet the server is the odd one out far more often than the engine: advise restoring
                # the server first (its peers and this engine agree on the engine's size).
                raise LMCacheError("connect", "mismatch",
                                   f"server chunk size {cs} != engine chunk size {self.chunk_size}; restart "
                                   f"the server with --chunk-size {self.chunk_size} (in a p2pctl fleet: "
                                   "`p2pctl down/up --node <node> --role server` re-renders it from fleet.yaml), "
                                   f"or, only if every server now uses {cs}, restart the engine with "
                                   f"--chunk-size {cs}")
            tc = lm.EngineDrivenTransferContext(self.reg.worker_id, rc)
            try:
                tc.register(
                    self.reg.tensors, self.reg.model_name, 1, cs // self.reg.block_size,
                    self.timeout_s, layout_hints={"kv_layout": "NHD"},
                    engine_group_infos=[lm.EngineGroupInfo(
                        engine_group_id=0, layer_indices=tuple(range(self.reg.num_layers)),
                        tokens_per_block=self.reg.block_size)],
                    engine_type=lm.EngineType.VLLM)
            except TimeoutError:
                tc.close()
                raise LMCacheError(
                    "connect", "timeout",
                    "REGISTER got no answer; is the server started with "
                    "--supported-transfer-mode auto?") from None
            except Exception as exc:
                tc.close()
                raise LMCacheError("connect", "error", f"REGISTER failed: {exc!r}") from exc
            return _Connection(rc, tc, cs, "shm" if "Shm" in type(tc.engine_driven_context).__name__ else "pickle")
        except BaseException:
            rc.close()
            raise

    def _reconnect_loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(timeout=self.reconnect_interval_s)
            self._wake.clear()
            with self._lock:
                retired, self._retired = self._retired, []
            for conn in retired:
                self._dispose(conn)
            conn = self._conn
            if self._closed.is_set():
                break
            if conn is None:
                self._try_connect()
            else:
                self._ping(conn)

    def _ping(self, conn: _Connection) -> None:
        """An idle engine sends nothing, so a dead server would go unnoticed (and /health would say ok) until
        the next request paid a timeout for it. A cheap RPC per interval notices it in the background."""
        try:
            conn.request_client.get_chunk_size().result(timeout=self.timeout_s)
        except Exception as exc:  # TimeoutError, or the client failing: either way the server is gone
            if not self._closed.is_set():
                logger.debug("LMCache ping failed: %r", exc)
                self._retire(conn, "stopped answering")

    def _dispose(self, conn: _Connection) -> None:
        try:
            fut = conn.transfer_context.unregister()
            if fut is not None:
                fut.result(timeout=_CLEANUP_TIMEOUT_S)
        except Exception as exc:
            logger.debug("LMCache unregister failed (server gone?): %r", exc)
        for closer in (conn.transfer_context.close, conn.request_client.close):
            try:
                closer()
            except Exception as exc:
                logger.debug("LMCache close failed: %r", exc)


def _done(value: Any) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def probe_chunk_size(url: str, timeout_s: float) -> int | None:
    """``None`` if the server does not answer in time."""
    lm = _import_lmcache()
    ctx = _zmq_context(lm)
    rc = lm.RequestClientFactory.create(url, context=ctx)
    try:
        return int(rc.get_chunk_size().result(timeout=timeout_s))
    except TimeoutError:
        return None
    finally:
        rc.close()
        _term_context(ctx)


@functools.cache
def _import_lmcache() -> SimpleNamespace:
    # lmcache logs every transfer at INFO and would phone home for usage stats; the engine's own
    # logs and metrics cover both. Explicit settings in the environment still win.
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
    started = time.monotonic()
    try:
        import zmq

        from lmcache.utils import EngineType
        from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey
        from lmcache.v1.multiprocess.group_view import EngineGroupInfo
        from lmcache.v1.multiprocess.transfer_context import EngineDrivenTransferContext
        from lmcache.v1.multiprocess.transport.factory import RequestClientFactory
    except ImportError as exc:
        raise RuntimeError(f"--lmcache-url needs the lmcache package (pip install 'p2p-kv-ops[node]'): "
                           f"{exc}") from exc
    logger.info("lmcache imported in %.1fs", time.monotonic() - started)
    return SimpleNamespace(zmq=zmq, EngineType=EngineType, IPCCacheServerKey=IPCCacheServerKey,
                           EngineGroupInfo=EngineGroupInfo, RequestClientFactory=RequestClientFactory,
                           EngineDrivenTransferContext=EngineDrivenTransferContext)


def _zmq_context(lm: SimpleNamespace) -> Any:
    ctx = lm.zmq.Context()
    ctx.setsockopt(lm.zmq.LINGER, 0)
    return ctx


def _term_context(ctx: Any) -> None:
    # term() blocks while any socket is open; never let a leaked socket hang shutdown.
    thread = threading.Thread(target=ctx.term, name="zmq-term", daemon=True)
    thread.start()
    thread.join(timeout=2.0)
