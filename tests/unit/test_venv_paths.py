"""Paths given through the environment or a --venv flag are the caller's: a relative one is made absolute from the
working directory once, where it is read (`resources.given_path`), since what it is handed to runs elsewhere (an
engine in its run folder, inference-perf in its output folder: issue 47)."""

from __future__ import annotations

from p2p_ops.cli import build_parser
from p2p_ops.cli.demo import vllm_fleet
from p2p_ops.resources import CHECKOUT, env_path, given_path
from tests.conftest import tool_venv


def test_a_relative_path_is_taken_from_the_working_directory_and_an_unset_variable_gives_the_default(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert given_path("a/../v") == tmp_path / "v" and given_path(tmp_path / "w") == tmp_path / "w"
    monkeypatch.setenv("P2P_X_VENV", "rel")
    assert env_path("P2P_X_VENV", CHECKOUT / ".venv-x") == tmp_path / "rel"
    monkeypatch.setenv("P2P_X_VENV", "")
    assert env_path("P2P_X_VENV", CHECKOUT / ".venv-x") == CHECKOUT / ".venv-x"


def test_p2p_vllm_venv_relative_is_the_callers_in_the_demos_fleet_and_the_bench(tmp_path, monkeypatch):
    from bench.suite.loadgen_peers import vllm_python

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_text("{}")
    (tmp_path / "v" / "bin").mkdir(parents=True)
    (tmp_path / "v" / "bin" / "python").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("P2P_VLLM_VENV", "v")
    assert vllm_fleet({}, str(model))["vllm"]["venv"] == str(tmp_path / "v")
    assert vllm_python() == tmp_path / "v" / "bin" / "python"


def test_p2p_router_venv_relative_is_the_callers_in_the_router_tier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("P2P_ROUTER_VENV", "r")
    assert tool_venv("P2P_ROUTER_VENV", ".venv-router") == tmp_path / "r"
    monkeypatch.delenv("P2P_ROUTER_VENV")
    assert tool_venv("P2P_ROUTER_VENV", ".venv-router") == CHECKOUT / ".venv-router"


def test_the_vllm_venv_flag_is_read_as_the_callers_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["init", "--local", "2", "--runtime", "vllm", "--vllm-venv", "../v"])
    assert args.vllm_venv == tmp_path.parent / "v"
