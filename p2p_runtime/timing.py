"""GPU timing emulation, in the spirit of llm-d-inference-sim's latency flags.

The CPU model is far slower per FLOP than a GPU but far smaller, so its raw timings say nothing
about a real deployment. When enabled, each step is padded with a sleep up to the time a GPU would
have taken: prefill costs ``prefill_us_per_token`` per computed token plus ``load_us_per_token`` per
token loaded from LMCache, and each decode step costs ``decode_ms_per_token``. Every target gets
seeded multiplicative jitter. Real work is never shortened: if the CPU was already slower than the
target, no sleep happens.
"""

from __future__ import annotations

from dataclasses import dataclass
import random
import threading
import time


@dataclass(frozen=True)
class TimingConfig:
    """Emulated GPU costs; all zero (the default) disables emulation."""

    prefill_us_per_token: float = 0.0
    decode_ms_per_token: float = 0.0
    load_us_per_token: float = 0.0
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("prefill_us_per_token", "decode_ms_per_token", "load_us_per_token"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        # Like llm-d-sim's std-dev limits: jitter beyond this stops looking like one GPU.
        if not 0 <= self.jitter <= 0.7:
            raise ValueError(f"timing jitter must be within [0, 0.7], got {self.jitter}")

    @property
    def enabled(self) -> bool:
        return any((self.prefill_us_per_token, self.decode_ms_per_token, self.load_us_per_token))


class TimingEmulator:
    def __init__(self, config: TimingConfig, sleep=time.sleep, clock=time.monotonic) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self._sleep = sleep
        self._clock = clock

    def prefill_target_s(self, computed_tokens: int, loaded_tokens: int) -> float:
        c = self.config
        base = computed_tokens * c.prefill_us_per_token + loaded_tokens * c.load_us_per_token
        return self._jittered(base / 1e6)

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
        if base <= 0 or not self.config.jitter:
            return base
        with self._lock:
            factor = 1.0 + self._rng.uniform(-self.config.jitter, self.config.jitter)
        return base * factor
