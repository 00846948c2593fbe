"""A small deterministic decoder-only transformer that computes real KV on the CPU.

Why it is built this way:

* Weights come from a seeded generator, so every node with the same seed and shape holds the same
  model and produces the same KV for the same tokens; KV pulled from a peer is then
  interchangeable with KV computed locally.
* Attention always reads K/V back from the paged cache, never from the freshly computed tensors,
  so KV loaded from LMCache and KV computed here go through the same code path.
* Prefill runs in fixed blocks of exactly ``chunk_size`` tokens (the last block padded), aligned
  to LMCache chunks. Computing ``[p, n)`` after loading ``[0, p)`` therefore issues the very same
  float operations, on the same shapes, as computing ``[0, n)`` from scratch, and the outputs
  match bitwise. A mismatched or corrupted chunk instead changes the answer, which is what makes
  "identical outputs" a real correctness check for P2P transfers.
"""

from __future__ import annotations

import logging
import math

import torch

from p2p_runtime.config import EngineConfig
from p2p_runtime.kv_cache import KVCacheSpec, PagedKVCache
from p2p_runtime.profiles import TINY, KVProfile
from p2p_runtime.tokenizer import EOS_ID, PRINTABLE_IDS

logger = logging.getLogger(__name__)

MLP_RATIO = 4
# Multiplies the usual 1/sqrt(head_size) attention scale: sharper attention lets a few
# positions dominate, so a wrong KV chunk visibly moves the hidden state.
ATTN_SHARPNESS = 4.0
# Added to the EOS logit; negative keeps most generations running to max_tokens.
EOS_BIAS = -2.0


def configure_threads(num_threads: int) -> None:
    """Pin torch's thread pools; a fixed thread count keeps float reductions in a fixed order."""
    torch.set_num_threads(num_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        # Already set (only allowed once per process, e.g. in a test session); harmless.
        pass


class TinyTransformer:
    """Pre-norm (RMSNorm with unit weights, rotary positions, SiLU MLP), greedy decoding. Its shape is the
    EngineConfig's (model_seed, num_layers, num_heads, head_size, vocab_size): equal shapes, equal weights; its
    chunk_size must be set (the engine resolves it first)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        gen = torch.Generator().manual_seed(config.model_seed)
        d, vocab = config.num_heads * config.head_size, config.vocab_size

        def normal(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

        # Creation order is part of the model's identity: changing it changes every weight.
        self.embed = normal(vocab, d, std=1.0)
        mlp = MLP_RATIO * d
        # Per layer: wqkv, wo, w1, w2.
        self.layers = [(normal(d, 3 * d, std=1 / math.sqrt(d)), normal(d, d, std=1 / math.sqrt(d)),
                        normal(d, mlp, std=1 / math.sqrt(d)), normal(mlp, d, std=1 / math.sqrt(mlp)))
                       for _ in range(config.num_layers)]
        lm_head = normal(d, vocab, std=1 / math.sqrt(d))
        # Only printable ASCII and EOS can be generated (see tokenizer.PRINTABLE_IDS).
        self.output_ids = torch.tensor([*PRINTABLE_IDS, EOS_ID], dtype=torch.long)
        self.lm_head = lm_head[:, self.output_ids].contiguous()
        self.output_bias = torch.zeros(len(self.output_ids))
        self.output_bias[-1] = EOS_BIAS
        half = config.head_size // 2
        inv_freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float64) / half))
        angles = torch.arange(config.max_model_len + config.chunk_size, dtype=torch.float64)[:, None] * inv_freq
        self._cos, self._sin = angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
        self.scale = ATTN_SHARPNESS / math.sqrt(config.head_size)
        self._masks: dict[int, torch.Tensor] = {}

    def kv_spec(self, num_blocks: int, block_size: int, profile: KVProfile | None = None) -> KVCacheSpec:
        """The paged-cache geometry this model writes: its own, or a real model's (``profile``, see
        ``kv_cache``) that its KV is expanded into."""
        c = self.config
        if profile is None or profile.name == TINY:
            return KVCacheSpec(c.num_layers, num_blocks, block_size, c.num_heads, c.head_size)
        return KVCacheSpec(profile.layers, num_blocks, block_size, profile.kv_heads, profile.head_size,
                           profile.torch_dtype, compute=(c.num_layers, c.num_heads, c.head_size))

    def prefill(self, token_ids: list[int], start: int, cache: PagedKVCache, block_table: list[int]) -> torch.Tensor:
        """KV for positions ``[start, len(token_ids))``, and the last one's logits. ``start`` is a multiple of
        ``chunk_size``: the positions before it are in the cache already (loaded from LMCache or computed)."""
        cs, n = self.config.chunk_size, len(token_ids)
        if start % cs or not 0 <= start < n:
            raise ValueError(f"prefill start {start} must be a multiple of {cs} and < {n}")
        for chunk_start in range(start, n, cs):
            valid = min(cs, n - chunk_start)
            ids = token_ids[chunk_start : chunk_start + valid] + [0] * (cs - valid)
            hidden = self._forward(torch.tensor(ids), chunk_start, valid, cache, block_table)
            last = valid - 1
        return self._logits(hidden[last])

    def decode(self, token_id: int, position: int, cache: PagedKVCache, block_table: list[int]) -> torch.Tensor:
        hidden = self._forward(torch.tensor([token_id]), position, 1, cache, block_table)
        return self._logits(hidden[0])

    def greedy(self, logits: torch.Tensor) -> int:
        return int(self.output_ids[int(torch.argmax(logits))])

    def _forward(self, ids: torch.Tensor, start: int, valid: int, cache: PagedKVCache, table: list[int]
                 ) -> torch.Tensor:
        c = self.config
        t, h, hs, d = ids.shape[0], c.num_heads, c.head_size, c.num_heads * c.head_size
        cos, sin = self._cos[start : start + t], self._sin[start : start + t]
        x = self.embed[ids]
        for index, (wqkv, wo, w1, w2) in enumerate(self.layers):
            qkv = _rms_norm(x) @ wqkv
            q, k, v = (part.reshape(t, h, hs) for part in qkv.split(d, dim=1))
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            # Padding rows of the last prefill block are never written: the cache holds only real tokens.
            cache.write(index, table, start, k[:valid], v[:valid])
            keys, values = cache.gather(index, table, start + valid)
            x = x + self._attention(q, keys, values, start).reshape(t, d) @ wo
            x = x + torch.nn.functional.silu(_rms_norm(x) @ w1) @ w2
        return _rms_norm(x)

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int) -> torch.Tensor:
        t, own = q.shape[0], keys.shape[0] - start
        scores = torch.matmul((q * self.scale).transpose(0, 1), keys.permute(1, 2, 0))
        # Query row i sits at position start + i and may see keys up to and including itself. Keys before ``start`` are
        # visible to the whole block, so only the block's own keys need the causal mask.
        scores[:, :, start:].masked_fill_(self._future_mask(t)[:, :own], float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), values.transpose(0, 1))
        return out.transpose(0, 1).contiguous()

    def _future_mask(self, t: int) -> torch.Tensor:
        if t not in self._masks:
            self._masks[t] = torch.ones(t, t, dtype=torch.bool).triu(1)
        return self._masks[t]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.lm_head + self.output_bias


def _rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
