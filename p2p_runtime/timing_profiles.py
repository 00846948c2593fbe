"""GPU timing: the emulator that pads the engine's steps, and its named profiles fitted to llm-d's H200 figures.

The CPU model is far slower per FLOP than a GPU but far smaller, so its raw timings say nothing about a real
deployment. When enabled (like llm-d-inference-sim's latency flags), each step is padded with a sleep up to the
time a GPU would have taken: prefill costs ``prefill_us_per_token`` per computed token plus ``load_us_per_token``
per token loaded from LMCache, each decode step ``decode_ms_per_token``, every target with seeded multiplicative
jitter. Real work is never shortened: if the CPU was already slower, no sleep happens.

The profiles are fitted reproducibly from llm-d's pull-vs-recompute calibration of gpt-oss-120b on H200 (reference
llmd-p2p.md section 10: the RDMA table and the later TCP report), so every report can name the profile and figures:

- prefill: us per computed token, least squares through the origin (prefill grows a little faster than linearly
  with attention; the worst relative error is kept as `prefill_fit_error`). On the TCP points it gives llm-d's own
  cost-model fit (P = 33.4 us/token, T = 15.6 us/token) within 1 %;
- pull: a fixed ms plus us per token (round trips, then bandwidth), least squares on the published pull legs.

Only the compute is emulated: pulls stay the box's real LMCache/NIXL path, so `load_us_per_token` is 0 (a GPU's
host-to-device copy of a loaded chunk is already inside llm-d's pull leg); `pull_*` only project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import random
import threading
import time
from typing import TYPE_CHECKING

from p2p_runtime.profiles import PROFILES

if TYPE_CHECKING:
    from p2p_runtime.config import EngineConfig

DEFAULT = "h200-rdma"
OFF = "off"
# (prompt tokens, recompute ms, pull ms): medians llm-d published for gpt-oss-120b on H200.
RDMA_POINTS = ((2048, 70.6, 49.0), (8192, 205.0, 120.0), (16384, 426.0, 196.0), (32768, 983.0, 376.0),
               (49152, 1695.0, 551.0))
TCP_POINTS = ((2048, 85.0, 52.0), (32768, 1102.0, 533.0))
# The KV the published pulls moved per token (gpt-oss-120b, bf16): what scales a pull to another model's bytes.
PUBLISHED_KV_BYTES = PROFILES["gpt-oss-120b"].bytes_per_token
# Not in llm-d's tables (their TPOT p90 of 33 ms is under 64 requests in flight): one step of an idle H200.
DECODE_MS = 4.0


def fit_through_origin(points: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    """Least-squares slope `a` of y = a*x, and the fit's worst relative error."""
    a = sum(x * y for x, y in points) / sum(x * x for x, _ in points)
    return a, max(abs(a * x - y) / y for x, y in points)


def fit_line(points: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


@dataclass(frozen=True)
class TimingProfile:
    name: str
    transport: str
    source: str
    prefill_us_per_token: float = 0.0
    prefill_fit_error: float = 0.0
    pull_fixed_ms: float = 0.0
    pull_us_per_token: float = 0.0
    decode_ms_per_token: float = 0.0
    load_us_per_token: float = 0.0
    jitter: float = 0.0

    @property
    def emulated(self) -> bool:
        return self.prefill_us_per_token > 0 or self.decode_ms_per_token > 0

    def prefill_ms(self, tokens: int) -> float:
        return tokens * self.prefill_us_per_token / 1000

    def pull_ms(self, tokens: int, bytes_per_token: int = PUBLISHED_KV_BYTES) -> float:
        """The profile's own transport (published), not this box's; the per-token part scales with the KV bytes
        a token weighs (bandwidth-bound), the fixed part does not (round trips)."""
        return self.pull_fixed_ms + tokens * self.pull_us_per_token * bytes_per_token / PUBLISHED_KV_BYTES / 1000

    @property
    def pull_gb_per_s(self) -> float:
        return PUBLISHED_KV_BYTES / self.pull_us_per_token / 1000 if self.has_pull else 0.0

    @property
    def has_pull(self) -> bool:
        return self.pull_us_per_token > 0

    @property
    def crossover_tokens(self) -> float | None:
        """Prefix length from which the published pull beats the emulated prefill (inf: never; None: no pull)."""
        if not self.has_pull:
            return None
        gain = self.prefill_us_per_token - self.pull_us_per_token
        return self.pull_fixed_ms * 1000 / gain if gain > 0 else math.inf

    def engine_settings(self) -> dict[str, float]:
        return {"prefill_us_per_token": round(self.prefill_us_per_token, 2),
                "decode_ms_per_token": self.decode_ms_per_token, "load_us_per_token": self.load_us_per_token,
                "timing_jitter": self.jitter}

    def describe(self) -> str:
        if not self.emulated:
            return f"{self.name}: no emulation, engines run at this box's CPU speed (the pull is measured)"
        own = (f" (the profile's {self.transport} pull would be {self.pull_fixed_ms:.0f} ms + "
               f"{self.pull_us_per_token:.1f} us/token at gpt-oss-120b's {PUBLISHED_KV_BYTES // 1024} KiB/token, "
               f"{self.pull_gb_per_s:.1f} GB/s)" if self.has_pull else "")
        return (f"{self.name} ({self.source}): emulated prefill {self.prefill_us_per_token:.1f} us/token and "
                f"decode {self.decode_ms_per_token:g} ms/step; the pull is measured on this box{own}")


def _fitted(name: str, transport: str, points: tuple, source: str) -> TimingProfile:
    prefill, err = fit_through_origin(tuple((n, r) for n, r, _ in points))
    fixed, per_token_ms = fit_line(tuple((n, p) for n, _, p in points))
    return TimingProfile(name, transport, source, prefill * 1000, err, fixed, per_token_ms * 1000, DECODE_MS,
                         jitter=0.05)


TIMING_PROFILES: dict[str, TimingProfile] = {p.name: p for p in (
    _fitted(DEFAULT, "RDMA", RDMA_POINTS, "llm-d, gpt-oss-120b on H200 over rdma/ib, 5-rep medians 2K-48K"),
    _fitted("h200-tcp", "TCP", TCP_POINTS, "llm-d, gpt-oss-120b on H200 over TCP, vLLM v0.27.1, 2K and 32K"),
    TimingProfile(OFF, "this box", "no emulation"),
    # bench placement's profile before the fit (results committed before it ran with it): hand-set, scaled up
    # so that emulated time, not a busy box's CPU, sets each request's cost.
    TimingProfile("slow-600us", "unfitted", "bench placement's earlier hand-set profile, not fitted",
                  prefill_us_per_token=600.0, decode_ms_per_token=4.0, load_us_per_token=30.0, jitter=0.05),
)}
TIMING_NAMES = tuple(TIMING_PROFILES)


def match(settings: dict) -> str | None:
    """The profile a fleet's engine settings run (the keys engine_settings writes; absent: 0), else None."""
    keys = ("prefill_us_per_token", "decode_ms_per_token", "load_us_per_token")
    for p in TIMING_PROFILES.values():
        want = p.engine_settings()
        if all(abs(float(settings.get(k) or 0.0) - want[k]) < 1e-6 for k in keys):
            return p.name
    return None


class TimingEmulator:
    """Emulates the costs an EngineConfig names (validated there); all zero, the default, sleeps never."""

    def __init__(self, config: EngineConfig, sleep=time.sleep, clock=time.monotonic) -> None:
        self.config = config
        self._rng = random.Random(config.timing_seed)
        self._lock = threading.Lock()
        self._sleep = sleep
        self._clock = clock

    def prefill_target_s(self, computed_tokens: int, loaded_tokens: int) -> float:
        c = self.config
        return self._jittered((computed_tokens * c.prefill_us_per_token + loaded_tokens * c.load_us_per_token) / 1e6)

    def decode_target_s(self) -> float:
        return self._jittered(self.config.decode_ms_per_token / 1e3)

    def pad(self, started: float, target_s: float) -> float:
        """Sleep until ``started + target_s`` (monotonic clock); return the seconds slept."""
        remaining = started + target_s - self._clock()
        if remaining <= 0:
            return 0.0
        self._sleep(remaining)
        return remaining

    def _jittered(self, base: float) -> float:
        jitter = self.config.timing_jitter
        if base <= 0 or not jitter:
            return base
        with self._lock:
            return base * (1.0 + self._rng.uniform(-jitter, jitter))
