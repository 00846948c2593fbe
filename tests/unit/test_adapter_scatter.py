"""The adapter's copy of retrieved chunks into paged KV: byte for byte what LMCache's own CPU scatter writes."""

import pytest
import torch

from p2p_runtime.kv_cache import scatter
from p2p_runtime.lmcache_adapter import KVRegistration, LMCacheAdapter, LMCacheError, _Connection

LAYERS, BLOCKS, BS, HEADS, SIZE, PER_CHUNK = 3, 12, 4, 2, 8, 2


def _paged():
    return {f"layer.{i}": torch.zeros(2, BLOCKS, BS, HEADS, SIZE, dtype=torch.bfloat16) for i in range(LAYERS)}


def _chunks(n, seed=3):
    # Random bit patterns (NaNs and infinities included): compared as integers, so every bit counts.
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(-2**15, 2**15, (2, LAYERS, PER_CHUNK * BS, HEADS * SIZE), generator=gen,
                          dtype=torch.int16).view(torch.bfloat16) for _ in range(n)]


def _bits(tensors):
    return [t.view(torch.int16) for t in tensors.values()]


# A run across the chunk boundary, a gap, descending ids and a single block.
TABLE = [5, 6, 7, 8, 11, 2, 1, 0]


def test_scatter_matches_lmcaches_own_scatter():
    base = pytest.importorskip("lmcache.v1.multiprocess.transfer_context.base")
    chunks, ours, theirs = _chunks(4), _paged(), _paged()
    scatter(ours, chunks, TABLE, BS)
    base.scatter_cpu_to_paged_kv(theirs, TABLE, chunks, PER_CHUNK, layout_hints={"kv_layout": "NHD"})
    assert all(torch.equal(a, b) for a, b in zip(_bits(ours), _bits(theirs)))
    untouched = [b for b in range(BLOCKS) if b not in TABLE]
    assert all(not t[:, untouched].any() for t in _bits(ours))


def test_scatter_refuses_chunks_of_another_geometry():
    with pytest.raises(ValueError, match="do not fit 3 layers and 3 blocks"):
        scatter(_paged(), _chunks(2), TABLE[:3], BS)


class _Ctx:
    """The engine-driven context's two retrieve calls, scripted."""

    def __init__(self, chunks):
        self.chunks, self.calls = chunks, []

    def prepare_retrieve(self, key, worker_id):
        self.calls.append("prepare")
        return self.chunks

    def commit_retrieve(self, key, worker_id):
        self.calls.append("commit")
        return True


@pytest.fixture
def adapter():
    from types import SimpleNamespace

    made = []

    def make(chunks):
        ctx = _Ctx(chunks)
        a = LMCacheAdapter("tcp://127.0.0.1:1", KVRegistration("m", _paged(), LAYERS, BS, 1))
        a._conn = _Connection(None, SimpleNamespace(engine_driven_context=ctx), PER_CHUNK * BS, "shm")
        made.append(a)
        return a, ctx

    yield make
    for a in made:
        a._conn = None  # the scripted connection has nothing to unregister
        a.close()


def test_retrieve_copies_then_releases_the_slots(adapter):
    chunks = _chunks(2)
    a, ctx = adapter(chunks)
    a.retrieve("s", list(range(2 * PER_CHUNK * BS)), 2, TABLE[:4])
    assert ctx.calls == ["prepare", "commit"]
    layer1 = a.reg.tensors["layer.1"].view(torch.int16).view(2, BLOCKS * BS, HEADS * SIZE)
    assert torch.equal(layer1[:, 5 * BS:9 * BS], torch.cat([c[:, 1] for c in chunks], dim=1).view(torch.int16))


def test_retrieve_that_does_not_fit_fails_and_still_releases_the_slots(adapter):
    a, ctx = adapter(_chunks(3))
    with pytest.raises(LMCacheError, match="retrieve failed"):
        a.retrieve("s", list(range(3 * PER_CHUNK * BS)), 3, TABLE[:4])
    assert ctx.calls == ["prepare", "commit"]


def test_retrieve_of_a_miss_fails(adapter):
    a, ctx = adapter(None)
    with pytest.raises(LMCacheError, match="retrieve failed"):
        a.retrieve("s", list(range(PER_CHUNK * BS)), 1, TABLE[:2])
    assert ctx.calls == ["prepare"]
