"""The two discovery routes a KV-aware router probes on each worker.

vllm-router's ``kv_aware`` policy, given no static ``--kv-event-source``, asks every worker
``GET /get_server_info`` (model id, instance id, KV block size: what its block keys depend on) and
``GET /kv_event_sources`` (the publisher of each data-parallel rank, keyed by rank as vLLM's
``get_kv_event_sources()`` returns it). Without events both answer 404, as vLLM does.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from p2p_runtime.core import EngineCore


def add_kv_event_routes(app: FastAPI, core: EngineCore) -> None:
    events = core.config.kv_events

    def not_enabled() -> JSONResponse:
        return JSONResponse({"object": "error", "type": "NotFoundError", "code": 404,
                             "message": "KV events are off; start the engine with "
                                        "--kv-events-config"}, status_code=404)

    @app.get("/get_server_info")
    async def get_server_info() -> JSONResponse:
        if not events.active:
            return not_enabled()
        return JSONResponse({"model_id": core.config.served_model_name,
                             "instance_id": core.config.label,
                             "kv_block_size": core.config.block_size})

    @app.get("/kv_event_sources")
    async def kv_event_sources() -> JSONResponse:
        if not events.active:
            return not_enabled()
        return JSONResponse({"0": asdict(events)})
