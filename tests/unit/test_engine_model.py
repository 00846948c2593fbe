"""The tiny transformer: seeded weights, bitwise-stable chunked prefill, sensitivity to bad KV."""

import pytest
import torch

from p2p_runtime.config import EngineConfig
from p2p_runtime.kv_cache import PagedKVCache
from p2p_runtime.model import TinyTransformer, configure_threads
from p2p_runtime.tokenizer import EOS_ID, PRINTABLE_IDS, ByteTokenizer
from tests.support import copy_blocks

CS = 256
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def model():
    configure_threads(1)
    return TinyTransformer(EngineConfig(model_seed=0, chunk_size=CS, max_model_len=4096))


def prompt(kind: str, length: int) -> list[int]:
    texts = {
        "doc": "Document 7: " + " ".join(["hi"] * 2000),
        "prose": "The quick brown fox jumps over the lazy dog. " * 100,
        "mixed": "".join(chr(32 + (i * 7919) % 95) for i in range(5000)),
    }
    return TOK.encode(texts[kind], add_bos=True)[:length]


def generate(model, ids, cache, table, start=0, n=24):
    """Greedy tokens plus the logits of the prefill, like the engine computes them."""
    logits = model.prefill(ids, start, cache, table)
    out = [model.greedy(logits)]
    for i in range(n - 1):
        out.append(model.greedy(model.decode(out[-1], len(ids) + i, cache, table)))
    return out, logits


def new_cache(model, num_blocks=160):
    return PagedKVCache(model.kv_spec(num_blocks, 16))


def test_same_seed_same_weights_other_seed_different():
    a, b, c = (TinyTransformer(EngineConfig(model_seed=seed, chunk_size=CS)) for seed in (3, 3, 4))
    assert torch.equal(a.embed, b.embed) and torch.equal(a.lm_head, b.lm_head)
    assert all(torch.equal(x, y) for la, lb in zip(a.layers, b.layers) for x, y in zip(la, lb))
    assert not torch.equal(a.embed, c.embed)


def test_same_seed_same_output_in_separate_models(model):
    twin = TinyTransformer(EngineConfig(model_seed=0, chunk_size=CS, max_model_len=4096))
    ids = prompt("prose", 600)
    out_a, _ = generate(model, ids, new_cache(model), list(range(60)))
    out_b, _ = generate(twin, ids, new_cache(twin), list(range(60)))
    assert out_a == out_b


def test_generates_only_printable_ascii_or_eos(model):
    out, _ = generate(model, prompt("mixed", 300), new_cache(model), list(range(30)), n=64)
    assert set(out) <= set(PRINTABLE_IDS) | {EOS_ID}
    assert len(set(out)) > 3


@pytest.mark.parametrize("kind,length,prefix_chunks", [
    ("doc", 700, 1), ("doc", 700, 2), ("prose", 768 + 1, 3), ("mixed", 1024, 3),
    ("mixed", 513, 2),
])
def test_prefill_after_loaded_prefix_is_bitwise_identical(model, kind, length, prefix_chunks):
    ids = prompt(kind, length)
    full_cache, full_table = new_cache(model), list(range(80))
    full_out, full_logits = generate(model, ids, full_cache, full_table)

    # Copy only the prefix KV into other, scattered blocks of another cache, as a retrieve does.
    part_cache = new_cache(model)
    part_table = list(range(159, 79, -1))
    nblocks = prefix_chunks * CS // 16
    copy_blocks(full_cache, full_table[:nblocks], part_cache, part_table[:nblocks])
    part_out, part_logits = generate(model, ids, part_cache, part_table,
                                     start=prefix_chunks * CS)

    assert torch.equal(full_logits, part_logits)
    assert part_out == full_out
    total = len(ids) + len(full_out) - 1
    for layer in range(model.config.num_layers):
        assert all(torch.equal(a, b) for a, b in zip(full_cache.gather(layer, full_table, total),
                                                     part_cache.gather(layer, part_table, total)))


def test_prefill_start_must_be_chunk_aligned(model):
    with pytest.raises(ValueError, match="multiple of 256"):
        model.prefill(prompt("doc", 600), 100, new_cache(model), list(range(40)))
    with pytest.raises(ValueError):
        model.prefill(prompt("doc", 512), 512, new_cache(model), list(range(40)))


def corrupt(kind, cache, blocks, other_cache, other_blocks):
    gen = torch.Generator().manual_seed(1)
    idx, oidx = torch.tensor(blocks), torch.tensor(other_blocks)
    for name, t in cache.tensors.items():
        if kind == "zeros":
            t[:, idx] = 0
        elif kind == "garbage":
            t[:, idx] = torch.randn(t[:, idx].shape, generator=gen)
        elif kind == "other_prompt":
            t[:, idx] = other_cache.tensors[name][:, oidx]
        elif kind == "k_v_swapped":
            t[:, idx] = t[:, idx].flip(0)
        elif kind == "heads_permuted":
            t[:, idx] = t[:, idx].roll(1, dims=3)


@pytest.mark.parametrize("kind", ["zeros", "garbage", "other_prompt", "k_v_swapped",
                                  "heads_permuted"])
@pytest.mark.parametrize("text", ["doc", "prose", "mixed"])
@pytest.mark.parametrize("bad_chunk", [0, 1])
def test_one_corrupted_loaded_chunk_changes_the_output(model, kind, text, bad_chunk):
    ids = prompt(text, 800)
    loaded_chunks = 3
    src, src_table = new_cache(model), list(range(60))
    good, _ = generate(model, ids, src, src_table)
    other_ids = prompt("mixed" if text != "mixed" else "doc", 800)
    other, other_table = new_cache(model), list(range(60))
    model.prefill(other_ids, 0, other, other_table)

    dst, dst_table = new_cache(model), list(range(100, 160))
    nblocks = loaded_chunks * CS // 16
    copy_blocks(src, src_table[:nblocks], dst, dst_table[:nblocks])
    per_chunk = CS // 16
    bad = slice(bad_chunk * per_chunk, (bad_chunk + 1) * per_chunk)
    corrupt(kind, dst, dst_table[bad], other, other_table[bad])
    out, _ = generate(model, ids, dst, dst_table, start=loaded_chunks * CS)
    assert out != good, f"{kind} in chunk {bad_chunk} went unnoticed"
