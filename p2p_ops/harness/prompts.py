"""Deterministic prompt text: the same (seed, index) gives the same document on every run and host."""

from __future__ import annotations

import random

from p2p_ops.endpoints import engine_api

_WORDS = ("cache prefix node peer chunk token layer head attention transfer fleet server engine router "
          "memory latency bandwidth replica shard batch queue kernel tensor vector matrix model weight "
          "request response stream signal packet frame buffer region page block index lookup store "
          "retrieve load evict warm cold hit miss share pull push").split()


def document(seed: int, index: int, approx_chars: int) -> str:
    """A pseudo-text of about approx_chars characters, unique per (seed, index)."""
    rng = random.Random(f"{seed}:{index}")
    words: list[str] = [f"Document {seed}-{index}."]
    size = len(words[0])
    while size < approx_chars:
        w = rng.choice(_WORDS)
        if rng.random() < 0.08:
            w += "."
        words.append(w)
        size += len(w) + 1
    return " ".join(words)


def question(seed: int, index: int) -> str:
    rng = random.Random(f"q:{seed}:{index}")
    return f"\nQuestion {index}: which {rng.choice(_WORDS)} comes after the {rng.choice(_WORDS)}? Answer:"


def count_tokens(engine_url: str, model: str, text: str) -> int:
    tokens, why = engine_api.tokenize(engine_url, model, text)
    if tokens is None:
        raise RuntimeError(why)
    return len(tokens)


def sized_document(engine_url: str, model: str, seed: int, index: int, target_tokens: int) -> tuple[str, int]:
    """A document of at least target_tokens tokens on that engine's tokenizer, and its exact token count."""
    chars = target_tokens
    for _ in range(6):
        text = document(seed, index, chars)
        n = count_tokens(engine_url, model, text)
        if n >= target_tokens:
            return text, n
        chars = int(chars * target_tokens / max(n, 1)) + 64
    raise RuntimeError(f"could not build a prompt of {target_tokens} tokens")
