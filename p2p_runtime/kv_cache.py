"""Paged KV cache and block allocator, in vLLM's layout.

Each layer owns one tensor of shape ``(2, num_blocks, block_size, num_heads, head_size)`` (K then V,
the NHD layout vLLM registers with LMCache), keyed ``"layer.<i>"``. LMCache reads and writes these
tensors directly by block id, so the model must address KV only through block tables: a request's
token at position ``p`` lives in block ``table[p // block_size]`` at offset ``p % block_size``.

The tensors have a model profile's storage geometry (``L`` layers of ``H x D`` in bf16/fp16), while the model
reads and writes its own small compute geometry (``C`` layers of ``h x d``) through ``write`` and ``gather``:
computing a real-size model on a CPU is far too slow (32 layers of hidden size 1024 took a minute per 1k-token
prefill on a 2-core box), yet what LMCache stores, pulls and loads must be real-sized. When the two differ,
:class:`KVExpansion` fills the storage per token, and ``check_loaded`` checks every loaded byte:

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

from dataclasses import dataclass

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
        self.layers_of = [list(range(c, self.s_layers, self.c_layers)) for c in range(self.c_layers)]
        gen = torch.Generator().manual_seed(_MASK_SEED)
        bits = torch.randint(0, 256, (self.s_layers, 2, self.width), generator=gen, dtype=torch.int32)
        sign = torch.tensor(torch.iinfo(self.int).min, dtype=self.int)
        self.mask = torch.where(bits >= 128, sign, torch.zeros((), dtype=self.int)) | (bits & 0x7F).to(self.int)
        self.mask[: self.c_layers, :, : self.src] = 0
        signs = torch.randint(0, 2, (2, self.src), generator=gen) * 2 - 1
        self.poison = (signs * POISON).float()

    def encode(self, c: int, k: torch.Tensor, v: torch.Tensor) -> dict[int, torch.Tensor]:
        """Storage layer -> its K/V rows (integer view, (2, t, width)) for compute layer c's k, v (t, h, d)."""
        tiled = self._tile(torch.stack((k, v)).reshape(2, k.shape[0], self.src).to(self.dtype).view(self.int))
        return {s: tiled ^ self.mask[s, :, None, :] for s in self.layers_of[c]}

    def mismatches(self, stored: list[torch.Tensor]) -> torch.Tensor:
        """Per token, in how many (storage layer, K/V) rows a value differs from what its primary values imply;
        ``stored`` holds each storage layer's integer view of the loaded tokens, shape (2, n, width)."""
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
        return (primary.view(self.dtype).float() + self.poison[:, None, :]).to(self.dtype).view(self.int)


class OutOfBlocksError(RuntimeError):
    pass


@dataclass(frozen=True)
class KVCacheSpec:
    """Geometry of the paged KV cache: what is stored (and registered with LMCache), and what the model
    computes (``compute``: layers, heads, head size, expanded into the storage; None = the stored geometry)."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_heads: int
    head_size: int
    dtype: torch.dtype = torch.float32
    compute: tuple[int, int, int] | None = None

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_heads * self.head_size * self.dtype.itemsize


class PagedKVCache:
    def __init__(self, spec: KVCacheSpec) -> None:
        self.spec = spec
        shape = (2, spec.num_blocks, spec.block_size, spec.num_heads, spec.head_size)
        # Zero-filled so an unwritten slot is recognisable when debugging a bad load.
        self.tensors: dict[str, torch.Tensor] = {
            f"layer.{i}": torch.zeros(shape, dtype=spec.dtype) for i in range(spec.num_layers)
        }
        storage = (spec.num_layers, spec.num_heads, spec.head_size)
        self.expansion = KVExpansion(spec.compute, storage, spec.dtype) if spec.compute else None

    def layer(self, index: int) -> torch.Tensor:
        return self.tensors[f"layer.{index}"]

    def write(self, layer: int, block_table: list[int], start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Compute layer ``layer``'s K/V rows for positions ``[start, start + len(k))``."""
        runs = slot_runs(block_table, self.spec.block_size, start, k.shape[0])
        slots = torch.tensor([s for first, last in runs for s in range(first, last)], dtype=torch.long)
        if self.expansion is None:
            self.layer(layer).view(2, -1, self.spec.num_heads, self.spec.head_size)[:, slots] = torch.stack((k, v))
            return
        for storage, rows in self.expansion.encode(layer, k, v).items():
            self._rows(storage)[:, slots] = rows

    def gather(self, layer: int, block_table: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute layer ``layer``'s K and V for positions ``[0, length)``, shape ``(length, h, d)``."""
        bs = self.spec.block_size
        nblocks = -(-length // bs)
        if nblocks > len(block_table):
            raise IndexError(f"need {nblocks} blocks for {length} tokens, the table has {len(block_table)}")
        ids = torch.tensor(block_table[:nblocks], dtype=torch.long)
        # The compute geometry's values are the first h * d of each stored row (all of it without expansion).
        _, heads, size = self.spec.compute or (self.spec.num_layers, self.spec.num_heads, self.spec.head_size)
        rows = self.layer(layer).view(2, self.spec.num_blocks, bs, -1)[..., : heads * size].index_select(1, ids)
        kv = rows.reshape(2, nblocks * bs, heads, size).float()
        return kv[0, :length], kv[1, :length]

    def check_loaded(self, block_table: list[int], length: int) -> int:
        """Check every stored value of positions ``[0, length)`` (whole blocks, as loaded from LMCache) against
        the primary values they were loaded with; fold an offset into each disagreeing token's primary K/V
        (module docstring) and return how many tokens disagreed. Without expansion there is nothing to check."""
        if self.expansion is None or length <= 0:
            return 0
        bad = 0
        for first, last in slot_runs(block_table, self.spec.block_size, 0, length):
            # Runs of consecutive slots are views: nothing is copied unless a token disagrees.
            stored = [self._rows(s)[:, first:last] for s in range(self.spec.num_layers)]
            wrong = torch.nonzero(self.expansion.mismatches(stored)).flatten()
            if wrong.numel():
                src = self.expansion.src
                for c in range(self.expansion.c_layers):
                    self._rows(c)[:, first + wrong, :src] = self.expansion.fold(stored[c][:, wrong, :src])
                bad += int(wrong.numel())
        return bad

    def _rows(self, storage_layer: int) -> torch.Tensor:
        """One storage layer as (2, slots, values) of its integer view (exact bit patterns)."""
        return self.layer(storage_layer).view(self.expansion.int).view(2, -1, self.spec.num_heads * self.spec.head_size)


def slot_runs(block_table: list[int], block_size: int, start: int, count: int) -> list[tuple[int, int]]:
    """[first, last) slot ranges covering positions [start, start + count) in order, one per run of consecutive
    slots: a run of consecutive blocks is one range, so it is one strided copy."""
    runs: list[tuple[int, int]] = []
    end = start + count
    for block in range(start // block_size, -(-end // block_size)):
        shift = (block_table[block] - block) * block_size   # position -> slot within this block
        first, last = shift + max(start, block * block_size), shift + min(end, (block + 1) * block_size)
        if runs and runs[-1][1] == first:
            first = runs.pop()[0]
        runs.append((first, last))
    return runs


def scatter(tensors: dict[str, torch.Tensor], chunks: list[torch.Tensor], block_ids: list[int],
            block_size: int) -> None:
    """Copy LMCache chunk objects, (2, layers, tokens, heads * head_size) each, into paged KV tensors (this
    module's layout) at ``block_ids`` in order: one strided copy per layer and run of consecutive slots within a
    chunk. LMCache's own CPU scatter (torch_ops.mp_mem_kernels._transfer_per_layer_nhd) is an index_copy_ per layer,
    K/V and chunk, which torch's CPU moves one element at a time: 3x the CPU of this copy at 512 MiB
    (bench/README.md, "Where the real-size pull goes")."""
    layers = [t.view(2, -1, t.shape[-2] * t.shape[-1]) for t in tensors.values()]  # (2, slots, width)
    tokens = chunks[0].shape[2]
    if chunks[0].shape[1] != len(layers) or len(block_ids) * block_size < len(chunks) * tokens:
        raise ValueError(f"{len(chunks)} chunks of shape {tuple(chunks[0].shape)} do not fit {len(layers)} layers "
                         f"and {len(block_ids)} blocks of {block_size} tokens")
    for c, chunk in enumerate(chunks):
        done = 0
        for first, last in slot_runs(block_ids, block_size, c * tokens, tokens):
            for i, dst in enumerate(layers):
                dst[:, first:last].copy_(chunk[:, i, done:done + last - first])
            done += last - first


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
            raise OutOfBlocksError(f"request {request_id} needs {count} KV blocks but only {len(self._free)} of "
                                   f"{self.num_blocks} are free; raise --num-blocks or lower max_tokens")
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
