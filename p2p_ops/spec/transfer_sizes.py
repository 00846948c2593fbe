"""The size plan (kvbench's idea): what a fleet's P2P reads weigh, from its model profile, chunk and prompt length.

LMCache moves KV as chunk objects (`chunk_size` tokens of every layer) and a prefix hit reads all its chunks in
one batch, so the sizes worth testing are one chunk up to the longest prefix, as whole chunks. `counts` are
objects per read (`p2p_ops.bench.channel.Options.counts`): powers of two, then the whole prefix.

`need_ms(fleet, plan)` is how fast the whole prefix must arrive for the pull to beat recomputing it: the fleet's
emulated prefill (`engine.prefill_us_per_token`) where it sets one, else a GPU's: the default timing profile's
(`p2p_runtime.timing_profiles`, fitted to llm-d's H200 figures, ~32 us per token) for the prefix's tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from p2p_ops.errors import BadInput
from p2p_ops.spec.model import Fleet
from p2p_runtime.profiles import resolve as resolve_profile
from p2p_runtime.timing_profiles import DEFAULT as DEFAULT_TIMING
from p2p_runtime.timing_profiles import TIMING_PROFILES


@dataclass(frozen=True)
class SizePlan:
    bytes_per_token: int
    chunk_tokens: int
    prompt_tokens: int
    chunk_bytes: int       # one L1 object: a chunk's KV, rounded up to whole L1 pages
    prefix_chunks: int     # whole chunks of the prompt (a partial last chunk is recomputed, never pulled)
    prefix_bytes: int
    counts: tuple[int, ...]

    def to_dict(self) -> dict:
        return {**asdict(self), "sizes_bytes": [n * self.chunk_bytes for n in self.counts]}


def size_plan(bytes_per_token: int, chunk_tokens: int, prompt_tokens: int, page_size: int = 65536) -> SizePlan:
    if bytes_per_token < 1 or chunk_tokens < 1 or page_size < 1:
        raise BadInput(f"bytes per token {bytes_per_token}, chunk {chunk_tokens} tokens, page {page_size} bytes: "
                       "each must be >= 1")
    if prompt_tokens < chunk_tokens:
        raise BadInput(f"prompt length {prompt_tokens} tokens is shorter than one chunk ({chunk_tokens} tokens): "
                       "nothing would be pulled; give a prompt of at least one chunk")
    chunk = -(-bytes_per_token * chunk_tokens // page_size) * page_size
    chunks = prompt_tokens // chunk_tokens
    counts = (*(2**k for k in range((chunks - 1).bit_length())), chunks)  # the powers of two below, then all
    return SizePlan(bytes_per_token, chunk_tokens, prompt_tokens, chunk, chunks, chunks * chunk, counts)


def need_ms(fleet: Fleet, plan: SizePlan) -> tuple[float, str]:
    """(milliseconds, where the rate comes from) for recomputing the plan's whole prefix."""
    tokens = plan.prefix_chunks * plan.chunk_tokens
    rate, source = fleet.engine.prefill_us_per_token, "the fleet's engine.prefill_us_per_token"
    if not rate:
        rate = TIMING_PROFILES[DEFAULT_TIMING].prefill_us_per_token
        source = f"a GPU's prefill (timing profile {DEFAULT_TIMING}, llm-d's H200 figures)"
    return round(tokens * rate / 1e3, 1), f"recomputing {tokens} tokens at {rate:.1f} us/token, {source}"


def fleet_size_plan(fleet: Fleet, prompt_tokens: int, chunk_tokens: Optional[int] = None) -> SizePlan:
    """The plan under the spec's chunk size, or a server's own (`chunk_tokens`, read from its /status)."""
    e = fleet.engine
    profile = resolve_profile(e.profile, e.num_layers, e.num_heads, e.head_size)
    return size_plan(profile.bytes_per_token, chunk_tokens or fleet.settings.chunk_size, prompt_tokens,
                     fleet.settings.l1_align_bytes)


# `lmcache server --eviction-trigger-watermark`'s default (0.5.6's --help: "Default is 0.8"): above this share of
# L1 a server evicts, and a restore buffer that does not fit below it fails as l1_oom.
EVICTION_WATERMARK = 0.8


def l1_shortfall(fleet: Fleet, prompt_tokens: int) -> Optional[str]:
    """Why a pull of `prompt_tokens` cannot be measured on this fleet (None: it fits). The reader keeps the
    pulled prefix and its own recompute of the same length in L1, so twice the prefix must fit below the
    eviction watermark of the smallest L1."""
    plan = fleet_size_plan(fleet, prompt_tokens)
    inst = min((i for _, i in fleet.instances()), key=lambda i: fleet.effective_settings(i).l1_size_gb)
    l1_gb = fleet.effective_settings(inst).l1_size_gb
    if 2 * plan.prefix_bytes <= EVICTION_WATERMARK * l1_gb * 2**30:
        return None
    need_gb = 2 * plan.prefix_bytes / EVICTION_WATERMARK / 2**30
    return (f"{prompt_tokens} tokens need 2 x {plan.prefix_bytes / 2**20:,.0f} MiB of L1 below the "
            f"{EVICTION_WATERMARK:.0%} eviction watermark, more than {inst.id}'s settings.l1_size_gb={l1_gb:g} "
            f"holds; raise settings.l1_size_gb to at least {need_gb:.1f}")
