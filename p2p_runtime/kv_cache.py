"""Paged KV cache and block allocator, in vLLM's layout.

Each layer owns one tensor of shape ``(2, num_blocks, block_size, num_heads, head_size)`` (K then V,
the NHD layout vLLM registers with LMCache), keyed ``"layer.<i>"``. LMCache reads and writes these
tensors directly by block id, so the model must address KV only through block tables: a request's
token at position ``p`` lives in block ``table[p // block_size]`` at offset ``p % block_size``.

The tensors have the storage geometry (a model profile's layers, KV heads, head size and dtype); the
model reads and writes its own, smaller compute geometry through ``write`` and ``gather``. When the two
differ, ``kv_layout.KVExpansion`` fills the rest and ``check_loaded`` checks every loaded byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from p2p_runtime.kv_layout import KVExpansion


class OutOfBlocksError(RuntimeError):
    pass


@dataclass(frozen=True)
class KVCacheSpec:
    """Geometry of the paged KV cache: what is stored (and registered with LMCache), and what the model
    computes (``compute``: layers, heads, head size; None = the stored geometry, in float32)."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_heads: int
    head_size: int
    dtype: torch.dtype = torch.float32
    compute: Optional[tuple[int, int, int]] = None

    @property
    def bytes_per_token(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_heads * self.head_size * elem

    @property
    def expanded(self) -> bool:
        storage = (self.num_layers, self.num_heads, self.head_size)
        return self.compute is not None and (self.compute != storage or self.dtype != torch.float32)


class PagedKVCache:
    def __init__(self, spec: KVCacheSpec) -> None:
        self.spec = spec
        shape = (2, spec.num_blocks, spec.block_size, spec.num_heads, spec.head_size)
        # Zero-filled so an unwritten slot is recognisable when debugging a bad load.
        self.tensors: dict[str, torch.Tensor] = {
            f"layer.{i}": torch.zeros(shape, dtype=spec.dtype) for i in range(spec.num_layers)
        }
        self.expansion: Optional[KVExpansion] = None
        if spec.expanded:
            self.expansion = KVExpansion(spec.compute, (spec.num_layers, spec.num_heads, spec.head_size),
                                         spec.dtype)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def layer(self, index: int) -> torch.Tensor:
        return self.tensors[f"layer.{index}"]

    def write(self, layer: int, block_table: list[int], start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Compute layer ``layer``'s K/V rows for positions ``[start, start + len(k))``."""
        slots = self._slots(block_table, start, k.shape[0])
        if self.expansion is not None:
            for storage, rows in self.expansion.encode(layer, k, v).items():
                self._rows(storage)[:, slots] = rows
            return
        kv = self.layer(layer)
        flat = kv.view(2, -1, self.spec.num_heads, self.spec.head_size)
        flat[0, slots] = k
        flat[1, slots] = v

    def gather(self, layer: int, block_table: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute layer ``layer``'s K and V for positions ``[0, length)``, shape ``(length, h, d)``."""
        bs = self.spec.block_size
        nblocks = -(-length // bs)
        if nblocks > len(block_table):
            raise IndexError(f"need {nblocks} blocks for {length} tokens, the table has "
                             f"{len(block_table)}")
        ids = torch.tensor(block_table[:nblocks], dtype=torch.long)
        if self.expansion is not None:
            _, heads, size = self.spec.compute
            src = self.expansion.src
            rows = self.layer(layer).view(2, self.spec.num_blocks, bs, -1)[..., :src].index_select(1, ids)
            kv = rows.reshape(2, nblocks * bs, heads, size).float()
            return kv[0, :length], kv[1, :length]
        kv = self.layer(layer).index_select(1, ids)
        kv = kv.reshape(2, nblocks * bs, self.spec.num_heads, self.spec.head_size)
        return kv[0, :length], kv[1, :length]

    def check_loaded(self, block_table: list[int], length: int) -> int:
        """Check every stored value of positions ``[0, length)`` (whole blocks, as loaded from LMCache) against
        the primary values they were loaded with; fold an offset into each disagreeing token's primary K/V
        (``kv_layout``) and return how many tokens disagreed. A cache without expansion has nothing to check."""
        if self.expansion is None or length <= 0:
            return 0
        bad = 0
        for first, last in self._slot_runs(block_table, length):
            # Runs of consecutive slots are views: nothing is copied unless a token disagrees.
            stored = [self._rows(s)[:, first:last] for s in range(self.spec.num_layers)]
            wrong = torch.nonzero(self.expansion.mismatches(stored)).flatten()
            if wrong.numel():
                src = self.expansion.src
                for c in range(self.expansion.c_layers):
                    self._rows(c)[:, first + wrong, :src] = self.expansion.fold(stored[c][:, wrong, :src])
                bad += int(wrong.numel())
        return bad

    def _slot_runs(self, block_table: list[int], length: int) -> list[tuple[int, int]]:
        """[first, last) slot ranges covering positions [0, length), one per run of consecutive block ids."""
        bs, runs = self.spec.block_size, []
        for i, block in enumerate(block_table[: -(-length // bs)]):
            end = block * bs + min(bs, length - i * bs)
            if runs and runs[-1][1] == block * bs:
                runs[-1][1] = end
            else:
                runs.append([block * bs, end])
        return [(a, b) for a, b in runs]

    def _rows(self, storage_layer: int) -> torch.Tensor:
        """One storage layer as (2, slots, values) of its integer view (exact bit patterns)."""
        t = self.layer(storage_layer)
        return t.view(self.expansion.int).view(2, -1, self.spec.num_heads * self.spec.head_size)

    def copy_blocks(self, src: list[int], dst: list[int], other: "PagedKVCache | None" = None) -> None:
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
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        # Popped from the end, so low block ids are handed out first (easier to read in logs).
        self._free = list(range(num_blocks - 1, -1, -1))
        self._tables: dict[str, list[int]] = {}

    @property
    def usage(self) -> float:
        """As ``vllm:kv_cache_usage_perc`` reports it."""
        return 1.0 - len(self._free) / self.num_blocks if self.num_blocks else 0.0

    def can_allocate(self, count: int) -> bool:
        return count <= len(self._free)

    def allocate(self, request_id: str, count: int) -> list[int]:
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
        """Unknown ids are ignored so cleanup paths can repeat it."""
        table = self._tables.pop(request_id, None)
        if table:
            self._free.extend(reversed(table))
