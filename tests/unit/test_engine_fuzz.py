"""Fuzz the engine from its own OpenAPI schema: whatever a client sends, the answer is never a 5xx.

Bounded (a few dozen examples per operation, no deadline: the box may be busy), deterministic (derandomized),
so it can run with the unit tests.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.python import asgi

from p2p_runtime.api import create_app
from p2p_runtime.config import EngineConfig
from p2p_runtime.core import EngineCore

MODEL = "tiny-fuzz"

class _KeptRunning(EngineCore):
    """schemathesis runs the app's lifespan per client (the schema fetch is one); the engine must outlive
    those, so only the module fixture stops it."""

    def stop(self) -> None:
        pass


core = _KeptRunning(EngineConfig(served_model_name=MODEL, max_model_len=256, num_blocks=64, max_num_seqs=2,
                                 num_layers=1, max_body_bytes=64 * 1024))
app = create_app(core)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(scope="module")
def session():
    core.start()
    try:
        with asgi.get_client(app) as client:
            yield client
    finally:
        EngineCore.stop(core)


@schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_input_gives_a_5xx(case, session):
    # schemathesis's own read timeout is 10 s: a fuzzed request that asks for max_model_len tokens took longer
    # on a box at load average 20 (the suite under load), which is a slow answer, not a 5xx.
    response = case.call(session=session, timeout=120)
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
