"""Redaction: planted secrets never survive, the findings name kind/place/variable but never the secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_ops import files
from p2p_ops.diagnose.redact import MASK, manifest_entries, redact_text

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "redact"
PLANTED = "PLANTED"


@pytest.mark.parametrize("name", ["env_with_secrets.sh", "service_account.json", "server.log"])
def test_no_planted_secret_survives(name):
    result = redact_text(files.read_text(FIX / name), name)
    assert PLANTED not in result.text, [line for line in result.text.splitlines() if PLANTED in line]
    assert result.redactions and all(r.where == name for r in result.redactions)
    for entry in manifest_entries(result.redactions):
        assert PLANTED not in json.dumps(entry)


def test_env_file_keeps_harmless_settings_and_names_the_variables():
    result = redact_text(files.read_text(FIX / "env_with_secrets.sh"), "node-a-0/env.sh")
    for keep in ("PYTHONHASHSEED=0", "LMCACHE_CHUNK_SIZE=256", "UCX_TLS=rc,sm,self", "MODEL=Qwen/Qwen3-0.6B",
                 "--max-tokens 4096", "--port 8200"):
        assert keep in result.text
    assert 'OPENAI_API_KEY="<redacted>"' in result.text and "ANTHROPIC_API_KEY='<redacted>'" in result.text
    names = {r.name for r in result.redactions}
    assert {"HF_TOKEN", "OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
            "GOOGLE_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "WANDB_API_KEY", "SLACK_WEBHOOK_SECRET",
            "hf-token"} <= names
    kinds = {r.name: r.kind for r in result.redactions}
    assert kinds["HF_TOKEN"] == "huggingface_token" and kinds["AWS_ACCESS_KEY_ID"] == "aws_access_key_id"
    lines = {r.name: r.line for r in result.redactions}
    assert lines["HF_TOKEN"] == 5 and lines["hf-token"] == 18
    assert any(r.kind == "url_password" and r.line == 14 for r in result.redactions)


def test_json_service_account_stays_valid_json():
    result = redact_text(files.read_text(FIX / "service_account.json"), str(FIX / "service_account.json"))
    data = json.loads(result.text)
    assert data["private_key_id"] == MASK and data["client_email"].startswith("svc@")
    assert data["private_key"] == MASK  # the whole value goes: the name says it is a key
    assert {"private_key", "secret_assignment"} <= {r.kind for r in result.redactions}


def test_log_tokens_keys_and_truncated_key_block():
    result = redact_text(files.read_text(FIX / "server.log"), str(FIX / "server.log"))
    kinds = {r.kind for r in result.redactions}
    assert {"bearer_token", "authorization", "jwt", "private_key", "secret_assignment"} <= kinds
    assert "vllm:prompt_tokens_total 1234" in result.text and "cached_tokens=512" in result.text
    assert result.text.count("-----BEGIN OPENSSH PRIVATE KEY-----") == 1  # markers stay, material goes
    assert [r.line for r in result.redactions if r.kind == "private_key"] == [6, 12]


@pytest.mark.parametrize("text", [
    "HF_TOKEN=${HF_TOKEN}", "API_KEY=", "PASSWORD=<your-password>", "export SECRET=***",
    "max_tokens=5", "UCX_IB_GID_INDEX=3", "see docs for the password policy",
])
def test_placeholders_and_lookalikes_are_left_alone(text):
    result = redact_text(text)
    assert result.text == text and result.redactions == []


def test_overlapping_patterns_redact_once():
    result = redact_text('OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz012345')
    assert result.text == "OPENAI_API_KEY=<redacted>" and len(result.redactions) == 1
