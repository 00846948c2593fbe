"""One engine, three descriptions that must not drift: the fleet spec's `engine:` section, the rendered env.sh +
start_engine.sh, and the engine's own flags (p2p_runtime.config). The start line is expanded exactly as `up`
runs it (the dry run's bash expansion) and parsed with the engine's own parser."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from p2p_ops.lifecycle.render import fleet_runs, kv_events_config
from p2p_ops.spec.agreement import ENGINE_MODEL_ENV, engine_model
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.settings import ENGINE_FROM_FLEET, EngineSettings
from p2p_ops.spec.starter import local_fleet
from p2p_runtime.config import EngineConfig, build_parser

ENGINE_FIELDS = [f.name for f in fields(EngineConfig)]
SPEC_KEYS = list(EngineSettings.model_fields)

# A value other than the default for every key of `engine:`: with the default, a flag the template dropped
# would still come out right (the engine would fall back to the same number).
CHANGED = {
    "model_seed": 7, "num_layers": 3, "num_heads": 2, "head_size": 16, "profile": "llama-3-8b", "vocab_size": 300, "max_model_len": 2048,
    "block_size": 32, "num_blocks": 100, "max_num_seqs": 3, "threads": 2, "lmcache_timeout": 1.5,
    "lmcache_reconnect_interval": 0.5, "prefill_us_per_token": 12.5, "decode_ms_per_token": 3.0,
    "load_us_per_token": 0.25, "timing_jitter": 0.1, "timing_seed": 9, "log_level": "debug", "log_format": "json",
    "max_body_bytes": 4096, "max_queued": 5,
}


def test_every_engine_flag_is_a_spec_key_or_filled_from_the_fleet():
    assert not set(SPEC_KEYS) & set(ENGINE_FROM_FLEET)
    assert SPEC_KEYS == [f for f in ENGINE_FIELDS if f not in ENGINE_FROM_FLEET]
    assert set(ENGINE_FROM_FLEET) <= set(ENGINE_FIELDS)


def test_spec_defaults_are_the_engine_defaults():
    engine = EngineConfig()
    assert EngineSettings().model_dump() == {k: getattr(engine, k) for k in SPEC_KEYS}
    parsed = vars(build_parser().parse_args([]))
    assert {k: parsed[k] for k in SPEC_KEYS} == EngineSettings().model_dump()
    # The one default where the two used to differ: the fleet's (what every rendered fleet has run) won.
    assert (engine.model_seed, engine.vocab_size) == (1234, 384)


def test_the_changed_values_cover_every_key_and_differ_from_the_defaults():
    assert sorted(CHANGED) == sorted(SPEC_KEYS)
    defaults = EngineSettings().model_dump()
    assert [k for k in SPEC_KEYS if CHANGED[k] == defaults[k]] == []


def fleet_with(engine: dict) -> "object":
    data = local_fleet(2, name="agree")
    data["engine"] = engine
    data["api_key"] = "sk-agree-0123456789"
    data["router"] = {"enabled": True, "kv_events": True}
    return parse_fleet(data)


def started_configs(fleet, monkeypatch) -> list[tuple[object, object, EngineConfig, dict]]:
    """Per instance: the EngineConfig its rendered start line gives the engine, and its env.sh."""
    layout = RunLayout(Path("/srv/p2p-run/agree"))
    runs = fleet_runs(fleet, lambda n: layout)
    out = []
    for node, inst in fleet.instances():
        argv, env = list(runs[inst.id].command("engine")), runs[inst.id].env
        assert argv[0].endswith("/p2p-engine"), argv[0]
        # The engine reads its key from the environment env.sh exported, never from its command line.
        monkeypatch.setenv("P2P_ENGINE_API_KEY", env["P2P_ENGINE_API_KEY"])
        assert "--api-key" not in argv
        out.append((node, inst, EngineConfig.from_argv(argv[1:]), env))
    return out


@pytest.mark.parametrize("engine", [{}, CHANGED], ids=["defaults", "every-key-changed"])
def test_the_engine_starts_with_what_the_spec_says(engine, monkeypatch):
    fleet = fleet_with(engine)
    for node, inst, cfg, _ in started_configs(fleet, monkeypatch):
        assert {k: getattr(cfg, k) for k in SPEC_KEYS} == fleet.engine.model_dump()
        from_fleet = {
            "host": node.bind_host, "port": inst.ports.engine, "served_model_name": fleet.model,
            "lmcache_url": f"tcp://{node.address}:{inst.ports.mp}", "instance_id": inst.id,
            "chunk_size": fleet.effective_settings(inst).chunk_size,
            "kv_events_config": kv_events_config(fleet, node, inst), "api_key": fleet.api_key,
        }
        assert sorted(from_fleet) == sorted(ENGINE_FROM_FLEET), "a fleet-filled field this test does not check"
        assert {k: getattr(cfg, k) for k in from_fleet} == from_fleet
        assert cfg.kv_events.enable_kv_cache_events


def test_env_sh_carries_the_engine_model_peers_compare(monkeypatch):
    fleet = fleet_with(CHANGED)
    models = set()
    for _, _, _, env in started_configs(fleet, monkeypatch):
        for name in ENGINE_MODEL_ENV:
            key = name.removeprefix("P2P_ENGINE_").lower()
            assert env[name] == str(CHANGED[key]), name
        models.add(engine_model(env))
    assert models == {"seed=7 layers=3 heads=2 head_size=16 profile=llama-3-8b"}
