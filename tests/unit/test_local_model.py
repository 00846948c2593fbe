"""`p2pctl make-model`: a seeded tiny Llama, the same bytes for the same seed, refused over foreign files."""

from __future__ import annotations

import hashlib
import json

import pytest

from p2p_ops.harness.local_model import is_model_dir, make_model


def _digest(d) -> str:
    return hashlib.sha256((d / "model.safetensors").read_bytes() + (d / "tokenizer.json").read_bytes()).hexdigest()


def test_same_seed_same_model_other_seed_other_weights(tmp_path, p2pctl):
    code, out, err = p2pctl("make-model", str(tmp_path / "a"))
    assert code == 0, err
    make_model(tmp_path / "b")
    make_model(tmp_path / "c", __import__("p2p_ops.harness.local_model").harness.local_model.ModelSpec(seed=7))
    assert is_model_dir(tmp_path / "a")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != _digest(tmp_path / "c")
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 2 and cfg["max_position_embeddings"] == 8192
    assert "chat_template" in (tmp_path / "a" / "tokenizer_config.json").read_text() or \
        (tmp_path / "a" / "chat_template.jinja").is_file()


def test_tokenizer_round_trips_harness_text(tmp_path):
    from transformers import AutoTokenizer

    from p2p_ops.harness import prompts

    tok = AutoTokenizer.from_pretrained(make_model(tmp_path / "m"))
    text = prompts.document(3, 1, 2000)
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and tok.decode(ids[1:]) == text
    # Byte-level: text the tokenizer never saw still round-trips.
    assert tok.decode(tok("naïve ∑ 🙂")["input_ids"][1:]) == "naïve ∑ 🙂"


def test_refuses_a_folder_holding_something_else(tmp_path, p2pctl):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    code, _, err = p2pctl("make-model", str(tmp_path / "x"))
    assert code == 2 and "not empty" in err and "--force" in err
    assert (tmp_path / "x" / "notes.txt").read_text() == "mine"
    with pytest.raises(Exception):
        make_model(tmp_path / "x")
