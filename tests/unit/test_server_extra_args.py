"""settings.server_extra_args reach `lmcache server` as separate words, exactly as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.lifecycle.render import fleet_runs
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet

AWKWARD = ["--otlp-endpoint", "http://127.0.0.1:4317", "--log-tag", "it's a $(reboot) `x` ; y", "--a=b c"]


def _server_argv(data: dict, unit: str = "node-a-0") -> list[str]:
    return list(fleet_runs(parse_fleet(data), lambda n: RunLayout(Path("/srv/run")))[unit].command("server"))


def test_extra_args_are_appended_as_separate_quoted_words():
    data = local_fleet(2)
    data["settings"]["server_extra_args"] = AWKWARD
    argv = _server_argv(data)
    assert argv[-len(AWKWARD):] == AWKWARD
    assert "--p2p-load-timeout" in argv[:-len(AWKWARD)]


def test_no_extra_args_adds_no_empty_word():
    argv = _server_argv(local_fleet(2))
    assert "" not in argv and argv[-2] == "--p2p-load-timeout"


def test_an_instance_may_add_its_own():
    data = local_fleet(2)
    data["nodes"][1]["instances"][0]["settings"] = {"server_extra_args": ["--trace"]}
    assert _server_argv(data, "node-b-0")[-1] == "--trace"
    assert _server_argv(data, "node-a-0")[-1] != "--trace"


@pytest.mark.parametrize("bad,words", [
    (["--chunk-size", "512"], ["settings.server_extra_args", "--chunk-size", "sets from settings.chunk_size"]),
    (["--l1-size-gb=4"], ["--l1-size-gb", "sets from settings.l1_size_gb"]),
    ([""], ["empty string"]),
])
def test_flags_the_spec_already_sets_are_refused_with_the_field(bad, words):
    data = local_fleet(2)
    data["settings"]["server_extra_args"] = bad
    with pytest.raises(BadInput) as exc:
        parse_fleet(data)
    for w in words:
        assert w in str(exc.value)
