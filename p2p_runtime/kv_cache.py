"""Paged KV cache and block allocator, in vLLM's layout.

Each layer owns one tensor of shape ``(2, num_blocks, block_size, num_heads, head_size)`` (K then V,
the NHD layout vLLM registers with LMCache), keyed ``"layer.<i>"``. LMCache reads and writes these
tensors directly by block id, so the model must address KV only through block tables: a request's
token at position ``p`` lives in block ``table[p // block_size]`` at offset ``p % block_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class OutOfBlocksError(RuntimeError):
    """The paged KV cache has fewer free blocks than a request needs."""


@dataclass(frozen=True)
class KVCacheSpec:
    """Geometry of the paged KV cache."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_heads: int
    head_size: int
    dtype: torch.dtype = torch.float32

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token occupies across all layers (K and V)."""
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_heads * self.head_size * elem


class PagedKVCache:
    """The per-layer KV tensors plus block-addressed read and write helpers."""

    def __init__(self, spec: KVCacheSpec) -> None:
        self.spec = spec
        shape = (2, spec.num_blocks, spec.block_size, spec.num_heads, spec.head_size)
        # Zero-filled so an unwritten slot is recognisable when debugging a bad load.
        self.tensors: dict[str, torch.Tensor] = {
            f"layer.{i}": torch.zeros(shape, dtype=spec.dtype) for i in range(spec.num_layers)
        }

    def layer(self, index: int) -> torch.Tensor:
        return self.tensors[f"layer.{index}"]

    def write(
        self, layer: int, block_table: list[int], start: int, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Write K/V rows for positions ``[start, start + len(k))`` of one request."""
        slots = self._slots(block_table, start, k.shape[0])
        kv = self.layer(layer)
        flat = kv.view(2, -1, self.spec.num_heads, self.spec.head_size)
        flat[0, slots] = k
        flat[1, slots] = v

    def gather(
        self, layer: int, block_table: list[int], length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return contiguous K and V for positions ``[0, length)``, shape ``(length, H, D)``."""
        bs = self.spec.block_size
        nblocks = -(-length // bs)
        if nblocks > len(block_table):
            raise IndexError(f"need {nblocks} blocks for {length} tokens, the table has "
                             f"{len(block_table)}")
        ids = torch.tensor(block_table[:nblocks], dtype=torch.long)
        kv = self.layer(layer).index_select(1, ids)
        kv = kv.reshape(2, nblocks * bs, self.spec.num_heads, self.spec.head_size)
        return kv[0, :length], kv[1, :length]

    def copy_blocks(self, src: list[int], dst: list[int],
                    other: "PagedKVCache | None" = None) -> None:
        """Copy whole blocks ``src`` (of ``other``, default self) into blocks ``dst`` of self."""
        source = other or self
        s = torch.tensor(src, dtype=torch.long)
        d = torch.tensor(dst, dtype=torch.long)
        for name, t in self.tensors.items():
            t[:, d] = source.tensors[name][:, s]

    def _slots(self, block_table: list[int], start: int, count: int) -> torch.Tensor:
        bs = self.spec.block_size
        pos = torch.arange(start, start + count)
        table = torch.tensor(block_table, dtype=torch.long)
        return table[pos // bs] * bs + pos % bs


class BlockAllocator:
    """Free list of KV blocks plus each request's block table."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        # Popped from the end, so low block ids are handed out first (easier to read in logs).
        self._free = list(range(num_blocks - 1, -1, -1))
        self._tables: dict[str, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, as ``vllm:kv_cache_usage_perc`` reports it."""
        return 1.0 - len(self._free) / self.num_blocks if self.num_blocks else 0.0

    def can_allocate(self, count: int) -> bool:
        return count <= len(self._free)

    def allocate(self, request_id: str, count: int) -> list[int]:
        """Give ``request_id`` a table of ``count`` blocks.

        Raises:
            OutOfBlocksError: If fewer than ``count`` blocks are free.
            ValueError: If the request already holds blocks.
        """
        if request_id in self._tables:
            raise ValueError(f"request {request_id} already holds KV blocks")
        if count > len(self._free):
            raise OutOfBlocksError(
                f"request {request_id} needs {count} KV blocks but only {len(self._free)} of "
                f"{self.num_blocks} are free; raise --num-blocks or lower max_tokens"
            )
        table = [self._free.pop() for _ in range(count)]
        self._tables[request_id] = table
        return table

    def table(self, request_id: str) -> list[int]:
        return self._tables[request_id]

    def free(self, request_id: str) -> None:
        """Return a request's blocks; unknown ids are ignored so cleanup paths can repeat it."""
        table = self._tables.pop(request_id, None)
        if table:
            self._free.extend(reversed(table))
