"""Paged KV cache layout and block allocator."""

import pytest
import torch

from p2p_runtime.kv_cache import BlockAllocator, KVCacheSpec, OutOfBlocksError, PagedKVCache, slot_runs


def test_tensors_use_vllm_nhd_layout():
    cache = PagedKVCache(KVCacheSpec(num_layers=3, num_blocks=10, block_size=16, num_heads=4,
                                     head_size=8))
    assert list(cache.tensors) == ["layer.0", "layer.1", "layer.2"]
    assert all(t.shape == (2, 10, 16, 4, 8) and t.dtype == torch.float32
               for t in cache.tensors.values())
    assert cache.spec.bytes_per_token == 2 * 3 * 4 * 8 * 4


def test_write_then_gather_through_scattered_block_table():
    spec = KVCacheSpec(num_layers=1, num_blocks=8, block_size=4, num_heads=2, head_size=3)
    cache = PagedKVCache(spec)
    table = [5, 1, 7]  # deliberately out of order
    k = torch.arange(10 * 2 * 3, dtype=torch.float32).reshape(10, 2, 3)
    cache.write(0, table, 0, k, -k)
    keys, values = cache.gather(0, table, 10)
    assert torch.equal(keys, k) and torch.equal(values, -k)
    # Position 5 lives in block table[1] = 1 at offset 1.
    assert torch.equal(cache.layer(0)[0, 1, 1], k[5])


@pytest.mark.parametrize("table, start, count, runs", [
    ([5, 1, 7], 0, 10, [(20, 24), (4, 8), (28, 30)]),   # blocks of 4: scattered, the last one partly
    ([2, 3, 4], 0, 12, [(8, 20)]),                     # consecutive blocks are one run
    ([2, 3, 4], 2, 7, [(10, 17)]),                     # from and to the middle of a block
    ([3, 2], 0, 8, [(12, 16), (8, 12)]),               # descending ids are not a run
    ([6, 0, 9], 4, 4, [(0, 4)]),
    ([6], 0, 0, []),
])
def test_slot_runs_cover_the_positions_in_order_one_range_per_run_of_consecutive_slots(table, start, count, runs):
    assert slot_runs(table, 4, start, count) == runs
    slots = [table[p // 4] * 4 + p % 4 for p in range(start, start + count)]
    assert [s for a, b in runs for s in range(a, b)] == slots


def test_allocator_hands_out_and_reuses_blocks():
    alloc = BlockAllocator(4)
    a = alloc.allocate("a", 3)
    assert len(set(a)) == 3 and alloc.usage == 0.75
    assert alloc.table("a") == a
    alloc.free("a")
    alloc.free("a")  # idempotent
    assert alloc.usage == 0.0
    assert sorted(alloc.allocate("b", 4)) == [0, 1, 2, 3]


def test_allocator_errors_are_clear():
    alloc = BlockAllocator(2)
    alloc.allocate("a", 1)
    with pytest.raises(OutOfBlocksError, match="needs 2 KV blocks but only 1 of 2 are free"):
        alloc.allocate("b", 2)
    with pytest.raises(ValueError, match="already holds"):
        alloc.allocate("a", 1)
    assert not alloc.can_allocate(2) and alloc.can_allocate(1)
