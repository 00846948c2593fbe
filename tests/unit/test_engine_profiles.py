"""Real-model KV profiles: real byte sizes and layout, bitwise-stable loads, every loaded byte checked.

The model computes with its tiny geometry; the paged cache holds the profile's (kv_cache). A load that copies
a prefix's blocks into another cache must give bitwise the same answer as computing it, and one flipped, zeroed
or swapped value in any layer of any loaded chunk must change the answer (and be counted).
"""

import pytest
import torch

from p2p_runtime.config import ConfigError, EngineConfig
from p2p_runtime.kv_cache import PagedKVCache
from p2p_runtime.model import TinyTransformer, configure_threads
from p2p_runtime.profiles import PROFILES, KVProfile, resolve
from p2p_runtime.tokenizer import ByteTokenizer
from tests.support import copy_blocks

# A small chunk keeps a 32-layer cache cheap; the checks do not depend on the chunk size.
CS, BS = 64, 16
LOADED_CHUNKS = 3
TEXT = "Document 19: the quick brown fox jumps over the lazy dog while " * 8
IDS = ByteTokenizer().encode(TEXT, add_bos=True)[: LOADED_CHUNKS * CS + 20]
# Not a multiple of the compute row (128 values): the tiling falls back to an index gather.
ODD = KVProfile("odd", 5, 3, 96, "float16", "a test geometry")


@pytest.mark.parametrize("name,kib,chunk_mib", [("llama-3-8b", 128, 32), ("qwen3-8b", 144, 36),
                                                 ("qwen3-32b", 256, 64), ("gpt-oss-120b", 72, 18)])
def test_profiles_have_the_real_models_bytes_per_token(name, kib, chunk_mib):
    p = PROFILES[name]
    assert p.bytes_per_token == kib * 1024 and p.chunk_bytes == chunk_mib * 2**20
    assert p.l1_align_bytes == 65536 and p.dtype == "bfloat16" and p.block_size == 16


def test_engine_config_reports_the_profiles_kv_size_and_refuses_bad_names():
    cfg = EngineConfig(profile="llama-3-8b", num_blocks=512)
    assert cfg.kv_profile.layers == 32 and cfg.kv_bytes == 512 * 16 * 128 * 1024
    assert EngineConfig().kv_profile.bytes_per_token == 2048  # tiny: 2 layers x 4 heads x 32 x fp32
    with pytest.raises(ConfigError, match="--profile 'llama-9'.*tiny"):
        EngineConfig(profile="llama-9")
    with pytest.raises(ValueError, match="must fit"):
        resolve("gpt-oss-120b", 40, 4, 32)


@pytest.fixture(scope="module")
def model():
    configure_threads(1)
    return TinyTransformer(EngineConfig(model_seed=0, chunk_size=CS, max_model_len=1024))


def generate(model, cache, table, start=0, n=6):
    out = [model.greedy(model.prefill(IDS, start, cache, table))]
    for i in range(n - 1):
        out.append(model.greedy(model.decode(out[-1], len(IDS) + i, cache, table)))
    return out


class Setup:
    """A computed source cache and the answer; load() copies its prefix into a fresh table of `dst`."""

    def __init__(self, model, profile):
        self.model, self.profile = model, profile
        self.src, self.src_table = PagedKVCache(model.kv_spec(40, BS, profile)), list(range(20))
        self.good = generate(model, self.src, self.src_table)
        self.dst = PagedKVCache(model.kv_spec(40, BS, profile))
        self.dst_table = list(range(39, 19, -1))  # other, descending blocks: like a retrieve into a new request
        self.nblocks = LOADED_CHUNKS * CS // BS

    def load(self):
        copy_blocks(self.src, self.src_table[: self.nblocks], self.dst, self.dst_table[: self.nblocks])

    def answer_after_load(self):
        bad = self.dst.check_loaded(self.dst_table, LOADED_CHUNKS * CS)
        return generate(self.model, self.dst, self.dst_table, start=LOADED_CHUNKS * CS), bad


@pytest.fixture(scope="module", params=["llama-3-8b", "odd"])
def setup(request, model):
    return Setup(model, PROFILES.get(request.param, ODD))


def test_registered_tensors_have_the_profiles_layout(setup):
    p = setup.profile
    assert len(setup.src.tensors) == p.layers
    t = setup.src.tensors["layer.0"]
    assert t.shape == (2, 40, BS, p.kv_heads, p.head_size) and t.dtype == p.torch_dtype
    assert setup.src.spec.bytes_per_token == p.bytes_per_token
    # Every layer holds data, not zeros: real bytes move, not padding.
    assert all(t[:, :4].abs().sum() > 0 for t in setup.src.tensors.values())


def test_a_correct_load_is_bitwise_the_computed_answer(setup):
    setup.load()
    out, bad = setup.answer_after_load()
    assert bad == 0 and out == setup.good


def _flip(rows, layer, token):
    rows[0, token, 5] ^= 0x0100


def _zero(rows, layer, token):
    rows[1, token, rows.shape[2] - 1] = 0


def _swap_kv(rows, layer, token):
    rows[:, token] = rows[:, token].flip(0).clone()


def _swap_tokens(rows, layer, token):
    rows[:, [token, token + 1]] = rows[:, [token + 1, token]].clone()


KINDS = {"flip": _flip, "zero": _zero, "swap_kv": _swap_kv, "swap_tokens": _swap_tokens}


def _corrupt(setup, kind, layer, chunk):
    token_pos = chunk * CS + 7
    block, offset = setup.dst_table[token_pos // BS], token_pos % BS
    rows = setup.dst._rows(layer)
    KINDS[kind](rows, layer, block * BS + offset)


@pytest.mark.parametrize("layer", range(32))
def test_one_flipped_value_in_any_layer_of_a_loaded_chunk_changes_the_answer(model, layer):
    s = _llama(model)
    s.load()
    _corrupt(s, "flip", layer, chunk=layer % LOADED_CHUNKS)
    out, bad = s.answer_after_load()
    assert bad == 1, f"layer {layer}: the flipped value went unchecked"
    assert out != s.good, f"layer {layer}: the flipped value did not change the answer"


@pytest.mark.parametrize("kind", ["zero", "swap_kv", "swap_tokens"])
@pytest.mark.parametrize("layer", [0, 1, 2, 17, 31])
@pytest.mark.parametrize("chunk", [0, LOADED_CHUNKS - 1])
def test_zeroed_or_swapped_values_in_a_loaded_chunk_change_the_answer(model, kind, layer, chunk):
    s = _llama(model)
    s.load()
    _corrupt(s, kind, layer, chunk)
    out, bad = s.answer_after_load()
    assert bad >= 1 and out != s.good, f"{kind} in layer {layer}, chunk {chunk} went unnoticed"


def test_two_layers_swapped_whole_are_caught(model):
    s = _llama(model)
    s.load()
    a, b = s.dst._rows(4), s.dst._rows(5)
    tmp = a.clone()
    a.copy_(b)
    b.copy_(tmp)
    out, bad = s.answer_after_load()
    assert bad == LOADED_CHUNKS * CS and out != s.good


_LLAMA: dict[int, Setup] = {}


def _llama(model) -> Setup:
    if not _LLAMA:
        _LLAMA[0] = Setup(model, PROFILES["llama-3-8b"])
    return _LLAMA[0]


def test_tiny_profile_keeps_todays_cache_exactly(model):
    spec = model.kv_spec(8, BS, resolve("tiny", 2, 4, 32))
    assert spec.compute is None and spec.dtype == torch.float32 and spec.bytes_per_token == 2048
    assert PagedKVCache(spec).check_loaded(list(range(8)), 64) == 0
