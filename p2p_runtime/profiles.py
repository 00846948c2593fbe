"""Named KV geometries: what a real model's paged KV cache looks like, byte for byte.

A profile fixes the layout of the KV the engine registers with LMCache, stores and loads: layers, KV heads, head
size and dtype as the model's ``config.json`` gives them (vLLM's KV cache dtype ``auto`` follows the model's
dtype), plus a GPU fleet's block and chunk sizes (vLLM's CUDA default of 16 tokens per block, LMCache's default
chunk of 256 tokens). The compute stays the tiny model's (``kv_cache``). ``tiny`` is the engine's own geometry
(its ``--num-layers``, ``--num-heads``, ``--head-size``, float32). Pure: torch is imported only where tensors are
made, since the fleet spec reads this module without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

TINY = "tiny"
# The P2P recommendation for --l1-align-bytes (LMCache's docs): NIXL registers L1 in pages of this size.
P2P_ALIGN_BYTES = 65536
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class KVProfile:
    name: str
    layers: int
    kv_heads: int
    head_size: int
    dtype: str
    source: str
    block_size: int = 16
    chunk_size: int = 256

    @property
    def torch_dtype(self) -> "torch.dtype":
        import torch

        return getattr(torch, self.dtype)

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_size * _DTYPE_BYTES[self.dtype]

    @property
    def chunk_bytes(self) -> int:
        return self.bytes_per_token * self.chunk_size

    @property
    def l1_align_bytes(self) -> int:
        """P2P_ALIGN_BYTES when a chunk is a whole number of such pages, else the largest power of two dividing a
        chunk, so that no L1 object wastes a partial page."""
        align = P2P_ALIGN_BYTES
        while self.chunk_bytes % align:
            align //= 2
        return max(align, 4096)


# Geometry from each model's Hugging Face config.json (num_hidden_layers, num_key_value_heads, head_dim or
# hidden_size / num_attention_heads, torch_dtype).
PROFILES: dict[str, KVProfile] = {p.name: p for p in (
    KVProfile("llama-3-8b", 32, 8, 128, "bfloat16", "meta-llama/Meta-Llama-3-8B: 32 layers, 8 KV heads x 128"),
    KVProfile("qwen3-8b", 36, 8, 128, "bfloat16", "Qwen/Qwen3-8B: 36 layers, 8 KV heads x 128"),
    KVProfile("qwen3-32b", 64, 8, 128, "bfloat16", "Qwen/Qwen3-32B: 64 layers, 8 KV heads x 128"),
    # The model of llm-d's published H200 figures (timing_profiles.TIMING_PROFILES are fitted to them).
    KVProfile("gpt-oss-120b", 36, 8, 64, "bfloat16", "openai/gpt-oss-120b: 36 layers, 8 KV heads x 64"),
)}
PROFILE_NAMES = (TINY, *PROFILES)


def resolve(name: str, num_layers: int, num_heads: int, head_size: int) -> KVProfile:
    if name == TINY:
        return KVProfile(TINY, num_layers, num_heads, head_size, "float32", "the engine's compute geometry")
    if name not in PROFILES:
        raise ValueError(f"--profile {name!r}: use one of {', '.join(PROFILE_NAMES)}")
    p = PROFILES[name]
    if num_layers > p.layers or num_heads * head_size > p.kv_heads * p.head_size:
        raise ValueError(f"--profile {name} stores {p.layers} layers of {p.kv_heads}x{p.head_size} values: the "
                         f"model's {num_layers} layers of {num_heads}x{head_size} must fit in it")
    return p
