"""How the tiny model's KV fills a real model's KV geometry, and how every loaded byte stays checked.

Computing a real-size model on a CPU is far too slow (32 layers of hidden size 1024 took a minute per 1k-token
prefill on a 2-core box), yet what LMCache stores, pulls and loads must be real-sized. So the model computes with
its own small geometry (``C`` layers of ``h x d``) and the paged cache holds the profile's (``L`` layers of
``H x D`` in bf16/fp16), filled like this, per token:

* Primary slots: storage layer ``c < C`` keeps compute layer ``c``'s K (and V) in its first ``h * d`` values,
  rounded to the storage dtype. Attention reads only these, always from the cache.
* Every other stored value is a fixed function of a primary value: element ``j`` of storage layer ``l`` is
  element ``j mod (h * d)`` of compute layer ``l mod C``, with its sign bit and 7 low mantissa bits XORed by a
  seeded per-(layer, K/V, element) mask. XOR on the bit pattern is exact and leaves the exponent alone, so the
  bytes are finite values of the model's own magnitude, and any swap of layers, heads, K/V or positions lands
  a value under another mask.

Writing costs one gather and ``L / C`` XORs per computed chunk; the model's FLOPs do not change. After a load,
``KVExpansion.mismatches`` compares every loaded value of every layer with that function of the loaded primary
values (integer compare, so NaN patterns count too), and ``fold`` adds a large fixed offset to the primary K and V
of each token where anything differed. A correct load therefore leaves the answer bitwise as if computed here,
while one flipped, zeroed or swapped value in any layer of any loaded chunk changes it.
"""

from __future__ import annotations

import torch

# Seeds the masks; every engine of a fleet must use the same (it is part of what the bytes mean).
_MASK_SEED = 0x5EED
# Added (times a fixed +-1 pattern) to the primary K and V of a token whose loaded bytes disagree: far outside
# the model's value range, so the token's attention weight and value change visibly.
POISON = 8.0
_INT_VIEW = {2: torch.int16, 4: torch.int32}


class KVExpansion:
    def __init__(self, compute: tuple[int, int, int], storage: tuple[int, int, int], dtype: torch.dtype) -> None:
        (self.c_layers, h, d), (self.s_layers, heads, size) = compute, storage
        self.dtype, self.int = dtype, _INT_VIEW[dtype.itemsize]
        self.src, self.width = h * d, heads * size
        self.index = torch.arange(self.width) % self.src
        self.layers_of = [[s for s in range(self.s_layers) if s % self.c_layers == c] for c in range(self.c_layers)]
        gen = torch.Generator().manual_seed(_MASK_SEED)
        bits = torch.randint(0, 256, (self.s_layers, 2, self.width), generator=gen, dtype=torch.int32)
        sign = torch.tensor(torch.iinfo(self.int).min, dtype=self.int)
        self.mask = torch.where(bits >= 128, sign, torch.zeros((), dtype=self.int)) | (bits & 0x7F).to(self.int)
        self.mask[: self.c_layers, :, : self.src] = 0
        signs = torch.randint(0, 2, (2, self.src), generator=gen) * 2 - 1
        self.poison = (signs * POISON).float()

    def encode(self, c: int, k: torch.Tensor, v: torch.Tensor) -> dict[int, torch.Tensor]:
        """Storage layer -> its K/V rows (integer view, shape (2, t, width)) for compute layer c's k, v (t, h, d)."""
        x = torch.stack((k, v)).reshape(2, k.shape[0], self.src).to(self.dtype).view(self.int)
        tiled = self._tile(x)
        return {s: tiled ^ self.mask[s, :, None, :] for s in self.layers_of[c]}

    def mismatches(self, stored: list[torch.Tensor]) -> torch.Tensor:
        """Per token, in how many (storage layer, K/V) rows a value differs from what its primary values imply.

        Args:
            stored: Each storage layer's integer view of the loaded tokens, shape (2, n, width).
        """
        wrong = torch.zeros(stored[0].shape[1], dtype=torch.int64)
        tiled = [self._tile(stored[c][:, :, : self.src]) for c in range(self.c_layers)]
        for s, rows in enumerate(stored):
            unmasked = rows ^ self.mask[s, :, None, :]
            # Whole-layer equality first: a correct load (the usual case) costs one pass per layer.
            if not torch.equal(unmasked, tiled[s % self.c_layers]):
                wrong += (unmasked != tiled[s % self.c_layers]).any(dim=2).sum(dim=0)
        return wrong

    def _tile(self, x: torch.Tensor) -> torch.Tensor:
        """(2, t, src) -> (2, t, width): element j is x's element j mod src."""
        if self.width % self.src == 0:
            return x.repeat(1, 1, self.width // self.src)
        return x[:, :, self.index]

    def fold(self, primary: torch.Tensor) -> torch.Tensor:
        values = primary.view(self.dtype).float() + self.poison[:, None, :]
        return values.to(self.dtype).view(self.int)
