"""`api_key` in the fleet spec: env.sh (0600) carries it to the engines, every client sends it, nothing prints it."""

from __future__ import annotations

import tarfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from p2p_ops.endpoints import auth, engine_api, fetch
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

KEY = "sk-fleetkey-0123456789abcdefXYZ"


@pytest.fixture
def keyed(tmp_path):
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="keyed", api_key=KEY))
    yield ctx
    ctx.close()


def test_env_sh_carries_the_key_privately(keyed):
    launch.render(keyed)
    env = keyed.layout.env("node-a-0")
    text = env.read_text()
    assert f"export P2P_ENGINE_API_KEY={KEY}" in text and f"export VLLM_API_KEY={KEY}" in text
    assert env.stat().st_mode & 0o077 == 0
    assert "API_KEY" not in keyed.layout.env("coordinator").read_text()  # the coordinator does not need it


def test_no_key_no_lines(tmp_path):
    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="open"))
    launch.render(ctx)
    assert "API_KEY" not in ctx.layout.env("node-a-0").read_text()


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def _answer(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.end_headers()
            return
        body = b'{"object": "list", "data": [{"id": "tiny-llm"}]}' if self.path == "/v1/models" else \
            b'{"choices": [{"text": "ok"}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_every_client_sends_the_key_to_the_fleets_engines(keyed):
    """A stand-in engine on loopback that demands the key: readiness (vLLM's /v1/models), the harness and the
    probes all get through; a URL of no fleet gets no key."""
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        assert fetch.get_json(url + "/v1/models") is None  # not registered: no key sent
        auth.register(url, KEY)
        assert engine_api.vllm_ready(url, "tiny-llm")
        assert complete(url, "tiny-llm", "hi").ok
        assert fetch.get_json(url + "/v1/models")["data"][0]["id"] == "tiny-llm"
    finally:
        server.shutdown()
        server.server_close()
    node, inst = keyed.fleet.instances()[0]
    assert auth.headers(keyed.engine_url(node, inst) + "/v1/completions") == {"Authorization": f"Bearer {KEY}"}
    assert auth.headers(keyed.server_url(node, inst)) == {}  # lmcache servers never see it


def test_the_key_is_never_printed(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="quiet", api_key=KEY)
    for argv in (("validate", "-f", str(fleet)), ("up", "--dry-run", "-f", str(fleet))):
        code, out, err = p2pctl(*argv)
        assert code == 0, err
        assert KEY not in out + err, argv
    bad = write_local_fleet(tmp_path / "bad.yaml", 2, name="bad", api_key=KEY + "\n")
    code, out, err = p2pctl("validate", "-f", str(bad))
    assert code == 2 and KEY not in out + err and "api_key" in err


def test_bundle_redacts_the_key(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="bundled", api_key=KEY)
    ctx = FleetContext.load(fleet)
    launch.render(ctx)
    out = tmp_path / "b.tar.gz"
    code, stdout, err = p2pctl("bundle", "-f", str(fleet), "-o", str(out), "--no-doctor")
    assert code == 0, err
    with tarfile.open(out) as tar:
        for member in tar.getmembers():
            if member.isfile():
                assert KEY.encode() not in tar.extractfile(member).read(), member.name
