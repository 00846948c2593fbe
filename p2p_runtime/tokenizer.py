"""Deterministic byte-level tokenizer for the embedded engine.

Token ids 0..255 are the UTF-8 bytes of the text, followed by a few special tokens. Every node
tokenizes identically without downloading anything, which is what LMCache needs: chunk keys are
hashes of token ids, so peers that disagree on tokenization share nothing.

Ids from ``FIRST_UNUSED_ID`` up to ``vocab_size - 1`` exist in the embedding table (so the vocab
size can mimic a real model's) but are never produced by ``encode`` or generation.

The chat template is fixed for the same reason: every node must render a conversation to the same tokens. Each
message becomes ``<|role|>\\n<content>\\n``; the generation prompt is ``<|assistant|>\\n``. A conversation that
extends another one therefore extends its tokens too, which is what multi-turn prefix reuse relies on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
FIRST_UNUSED_ID = 259
SPECIAL_TOKENS = {BOS_ID: "<s>", EOS_ID: "</s>", PAD_ID: "<pad>"}

# Generation is limited to printable ASCII so every generated token is exactly one visible
# character: streamed deltas are never empty or half a UTF-8 sequence.
PRINTABLE_IDS = tuple(range(0x20, 0x7F))


@dataclass(frozen=True)
class ByteTokenizer:
    vocab_size: int = 512

    def __post_init__(self) -> None:
        if self.vocab_size < FIRST_UNUSED_ID:
            raise ValueError(f"vocab_size must be >= {FIRST_UNUSED_ID} (256 bytes + BOS/EOS/PAD), "
                             f"got {self.vocab_size}")

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Specials are dropped or rendered as ``<s>``-style names; an id outside the vocabulary: ValueError."""
        out = bytearray()
        parts: list[str] = []
        for tid in ids:
            if not 0 <= tid < self.vocab_size:
                raise ValueError(f"token id {tid} is outside the vocabulary [0, {self.vocab_size})")
            if tid < 256:
                out.append(tid)
                continue
            if skip_special_tokens:
                continue
            parts.append(out.decode("utf-8", errors="replace"))
            out.clear()
            parts.append(SPECIAL_TOKENS.get(tid, f"<unused_{tid}>"))
        parts.append(out.decode("utf-8", errors="replace"))
        return "".join(parts)


class ChatTemplateError(ValueError):
    """A message cannot be rendered (e.g. an image part)."""


def render_chat(messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    text = "".join(f"<|{role}|>\n{content}\n" for role, content in messages)
    return text + "<|assistant|>\n" if add_generation_prompt else text


def message_text(content: str | list | None) -> str:
    """OpenAI message content (a string or a list of text parts) as one string; a non-text part is a
    ChatTemplateError (no vision input here)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if (bad := next((part for part in content if part.type != "text" or part.text is None), None)) is not None:
        raise ChatTemplateError(f"unsupported content part type {bad.type!r}; only text parts are accepted")
    # vLLM joins text parts with newlines.
    return "\n".join(part.text for part in content)
