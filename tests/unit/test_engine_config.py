"""Engine flags: parsing, defaults and validation messages."""

from dataclasses import fields

import pytest

from p2p_runtime.config import ConfigError, EngineConfig, build_parser

# Every field is a flag (the fleet spec's engine section and start_engine.sh are built from the same fields).
FLAGS = ["--" + f.name.replace("_", "-") for f in fields(EngineConfig)]


def test_help_names_every_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert all(flag in text for flag in FLAGS)


def test_defaults_and_overrides():
    cfg = EngineConfig.from_argv([])
    assert (cfg.host, cfg.port, cfg.max_model_len, cfg.block_size, cfg.threads) == \
        ("127.0.0.1", 8000, 8192, 16, 1)
    assert cfg.chunk_size is None and cfg.lmcache_url == "" and cfg.label == "engine-8000"
    assert (cfg.model_seed, cfg.vocab_size) == (1234, 384)  # what a rendered fleet runs (EngineSettings)
    cfg = EngineConfig.from_argv(["--port", "0", "--chunk-size", "512", "--instance-id", "a-0",
                                  "--decode-ms-per-token", "20", "--timing-jitter", "0.1"])
    assert cfg.chunk_size == 512 and cfg.label == "a-0"
    assert cfg.decode_ms_per_token == 20 and cfg.timing_jitter == 0.1


@pytest.mark.parametrize("argv,message", [
    (["--chunk-size", "250"], "multiple of --block-size 16"),
    (["--num-blocks", "10"], "--num-blocks >= 512"),
    (["--head-size", "31"], "--head-size must be even"),
    (["--vocab-size", "100"], "--vocab-size must be >= 259"),
    (["--timing-jitter", "0.9"], "jitter"),
    (["--threads", "0"], "--threads must be > 0"),
    (["--port", "70000"], "--port"),
])
def test_invalid_flags_exit_2_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        EngineConfig.from_argv(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        EngineConfig(block_size=16, chunk_size=24)
    assert issubclass(ConfigError, ValueError)
