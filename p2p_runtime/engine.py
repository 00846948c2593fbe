"""Entry point of the embedded CPU engine: ``p2p-engine`` or ``python -m p2p_runtime.engine``.

Harnesses wait for the ready line (``engine ready on http://HOST:PORT (...)``; with ``--port 0`` it names the
port picked). SIGINT or SIGTERM drains in-flight requests for a few seconds, unregisters from LMCache and exits 0.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
import sys
import threading

import uvicorn

from p2p_runtime.api import create_app
from p2p_runtime.config import ConfigError, EngineConfig
from p2p_runtime.core import EngineCore

logger = logging.getLogger("p2p_runtime.engine")

READY_MESSAGE = "engine ready on"
_GRACEFUL_SHUTDOWN_S = 3


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, core: EngineCore) -> None:
        super().__init__(config)
        self.core = core

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if not self.started:
            return
        port = self.servers[0].sockets[0].getsockname()[1]
        cfg, core = self.core.config, self.core
        lmcache = f"{cfg.lmcache_url} {core.lmcache_state}" if cfg.lmcache_url else "off"
        logger.info("%s http://%s:%d (model=%s, instance=%s, lmcache=%s, chunk_size=%d)",
                    READY_MESSAGE, cfg.host, port, cfg.served_model_name, cfg.label, lmcache,
                    core.chunk_size)

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises caught signals after shutting down; the shutdown *is* the handling.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    config = EngineConfig.from_argv(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if config.log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler], force=True)
    if config.log_level.lower() != "debug":
        logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logger.info("effective config: %s", config)
    try:
        core = EngineCore(config)
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    server = _Server(uvicorn.Config(
        create_app(core), host=config.host, port=config.port, log_config=None,
        log_level=config.log_level, access_log=config.log_level.lower() == "debug",
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S), core)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C makes uvicorn skip the lifespan shutdown; still unregister from LMCache.
        core.stop()
    return 0 if server.started else 1


def run() -> None:
    """The console entry point: `main`, then an exit without the interpreter's teardown. Once the engine has
    drained and unregistered, that teardown (module clean-up and a last collection over torch's heap) took
    2-4 s of every stop on a busy 2-core box, and a fleet's `down` and every engine restart waited for it."""
    code = main()
    for t in threading.enumerate():      # whatever still writes (a log, an unregister) finishes first
        if t is not threading.main_thread() and not t.daemon:
            t.join(timeout=2)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
