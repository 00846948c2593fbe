"""`p2p-engine --log-format json`: every log line is one JSON object."""

from __future__ import annotations

import json
import logging

import pytest

from p2p_runtime.config import ConfigError, EngineConfig
from p2p_runtime.engine import JsonFormatter


def test_json_formatter_emits_one_object_per_record():
    rec = logging.LogRecord("p2p_runtime.engine", logging.WARNING, __file__, 1, "lmcache %s: %d", ("down", 3), None)
    doc = json.loads(JsonFormatter().format(rec))
    assert doc["level"] == "WARNING" and doc["logger"] == "p2p_runtime.engine" and doc["msg"] == "lmcache down: 3"
    assert doc["ts"].endswith("+00:00")


def test_exceptions_stay_inside_the_object():
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line and "boom" in json.loads(line)["exc"]


def test_flag_is_parsed_and_checked():
    assert EngineConfig.from_argv(["--log-format", "json"]).log_format == "json"
    with pytest.raises(ConfigError, match="--log-format must be text or json"):
        EngineConfig(log_format="xml")
