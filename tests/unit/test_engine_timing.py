"""GPU timing emulation: targets, jitter and padding (with a fake clock, no real sleeps)."""

import pytest

from p2p_runtime.config import ConfigError, EngineConfig
from p2p_runtime.timing_profiles import TimingEmulator


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_disabled_by_default():
    em = TimingEmulator(EngineConfig())
    assert em.prefill_target_s(1000, 1000) == 0 and em.decode_target_s() == 0


def test_targets_without_jitter():
    em = TimingEmulator(EngineConfig(prefill_us_per_token=100, decode_ms_per_token=20,
                                     load_us_per_token=10))
    assert em.prefill_target_s(1000, 2000) == pytest.approx(0.1 + 0.02)
    assert em.decode_target_s() == pytest.approx(0.02)


def test_jitter_is_bounded_and_seeded():
    cfg = EngineConfig(decode_ms_per_token=10, timing_jitter=0.2, timing_seed=7)
    first, second = TimingEmulator(cfg), TimingEmulator(cfg)
    seq1 = [first.decode_target_s() for _ in range(200)]
    seq2 = [second.decode_target_s() for _ in range(200)]
    assert seq1 == seq2
    assert all(0.008 <= t <= 0.012 for t in seq1)
    assert len(set(seq1)) > 100
    other = TimingEmulator(EngineConfig(decode_ms_per_token=10, timing_jitter=0.2, timing_seed=8))
    assert [other.decode_target_s() for _ in range(200)] != seq1


def test_pad_sleeps_only_the_remainder_and_never_shortens_work():
    fake = FakeClock()
    em = TimingEmulator(EngineConfig(decode_ms_per_token=50), sleep=fake.sleep, clock=fake.clock)
    started = fake.now
    fake.now += 0.01  # 10 ms of real work
    assert em.pad(started, 0.05) == pytest.approx(0.04)
    assert fake.slept == [pytest.approx(0.04)]
    started = fake.now
    fake.now += 0.2  # real work already slower than the target
    assert em.pad(started, 0.05) == 0.0
    assert len(fake.slept) == 1


@pytest.mark.parametrize("kwargs,flag", [({"timing_jitter": 0.8}, "--timing-jitter"),
                                         ({"timing_jitter": -0.1}, "--timing-jitter"),
                                         ({"prefill_us_per_token": -1}, "--prefill-us-per-token")])
def test_invalid_settings_are_rejected(kwargs, flag):
    with pytest.raises(ConfigError, match=flag):
        EngineConfig(**kwargs)
