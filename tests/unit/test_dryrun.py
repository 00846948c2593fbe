"""`up --dry-run` plan: per host, in order, with the command lines the wrappers are rendered from; with
--no-render, a file on disk that is not what p2pctl renders is a diff, never run and never shown as harmless.

A golden file pins the whole vLLM plan (UPDATE_GOLDEN=1 refreshes it).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from p2p_ops.endpoints import engine_api, fetch
from p2p_ops.facts.envfile import read_env_sh
from p2p_ops.lifecycle import dryrun, launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import fleet_runs
from p2p_ops.spec.starter import local_fleet

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden" / "dryrun"
KV_CFG = ('{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute",'
          '"kv_connector_extra_config":{"lmcache.mp.host":"tcp://10.0.0.2","lmcache.mp.port":5602}}')


def vllm_ssh_fleet(tmp_path: Path, model: str = "Qwen/Qwen3-8B") -> FleetContext:
    """Two GPU nodes reached over SSH (the golden vLLM fleet of test_render, on two addresses)."""
    data = local_fleet(2, name="golden", runtime="vllm", vllm={"device": "cuda", "model_path": "", "venv": "",
                                                               "enforce_eager": False, "max_model_len": None,
                                                               "gpu_memory_utilization": 0.8})
    data["model"] = model
    data["coordinator"] = {"host": "10.0.0.1", "port": 9300}
    for i, node in enumerate(data["nodes"]):
        node.update(address=f"10.0.0.{i + 1}", connection="ssh", ssh_user="ops", ssh_key="~/.ssh/id_fleet",
                    venv="/opt/p2p/.venv", run_dir="/srv/p2p-run")
        node["instances"][0]["gpu"] = i
        node["instances"][0].pop("cpus", None)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return FleetContext.load(path, run_dir="/home/ops/p2p-run/golden")


def test_vllm_plan_matches_golden(tmp_path):
    text = dryrun.format_plan(dryrun.plan(vllm_ssh_fleet(tmp_path)))
    golden = GOLDEN / "vllm_ssh.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), "dry-run plan differs from its golden file (UPDATE_GOLDEN=1 to refresh)"


def test_every_host_gets_its_commands_in_up_order(tmp_path):
    steps = dryrun.plan(vllm_ssh_fleet(tmp_path))
    assert list(steps) == ["node-a", "node-b"]
    a, b = steps["node-a"], steps["node-b"]
    assert a[0].startswith("check    bash -c true   (ssh ops@10.0.0.1;") and "host key verified" in a[0]
    kinds = [line.split()[0] for line in a]
    # reach, copy every file, then coordinator, server, engine (each: start, exec, ready)
    assert kinds == ["check"] + ["copy"] * 5 + ["start", "exec", "ready"] * 3
    assert [line.split()[0] for line in b] == ["check"] + ["copy"] * 3 + ["start", "exec", "ready"] * 2
    assert "copy     /home/ops/p2p-run/golden/node-b-0/start_engine.sh -> node-b:/srv/p2p-run/golden/node-b-0/" \
           "start_engine.sh (0700, over SFTP)" in b
    assert "copy     /home/ops/p2p-run/golden/node-b-0/env.sh -> node-b:/srv/p2p-run/golden/node-b-0/env.sh " \
           "(0600, over SFTP)" in b


def test_every_exec_line_is_the_argv_built_in_python(tmp_path):
    ctx = vllm_ssh_fleet(tmp_path)
    runs = fleet_runs(ctx.fleet, ctx.node_layout)
    lines = [x for node in dryrun.plan(ctx).values() for x in node if x.startswith("exec")]
    argvs = [list(run.command(role)) for run in runs.values() for role in run.argv]
    words = [shlex.split(x[len("exec"):]) for x in lines]
    assert len(lines) == len(argvs) == 5
    for argv in argvs:  # engines and servers carry the environment that changes them in front
        assert any(w[len(w) - len(argv):] == argv and all("=" in x for x in w[:len(w) - len(argv)])
                   for w in words), argv


def test_vllm_engine_line_is_the_full_wrapper_command(tmp_path):
    b = dryrun.plan(vllm_ssh_fleet(tmp_path))["node-b"]
    exec_engine = [line for line in b if line.startswith("exec") and " -m vllm." in line][0]
    words = shlex.split(exec_engine[len("exec"):])
    assert words == ["CUDA_VISIBLE_DEVICES=1", "PYTHONHASHSEED=0", "/opt/p2p/.venv/bin/python", "-m",
                     "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-8B", "--served-model-name",
                     "Qwen/Qwen3-8B", "--host", "10.0.0.2", "--port", "8002", "--kv-transfer-config", KV_CFG,
                     "--enable-prompt-tokens-details", "--gpu-memory-utilization", "0.8"]
    ready = [line for line in b if line.startswith("ready")][-1]
    assert "/health answers 200, then GET http://10.0.0.2:8002/v1/models lists Qwen/Qwen3-8B" in ready
    server = [line for line in b if line.startswith("exec") and " server " in line][0]
    assert "nice -n 10 /opt/p2p/.venv/bin/lmcache server --instance-id node-b-0" in server
    assert "--coordinator-url http://10.0.0.1:9300" in server and "--p2p-advertise-url 10.0.0.2:8552" in server


def test_awkward_values_stay_one_argument(tmp_path):
    ctx = vllm_ssh_fleet(tmp_path, model="/models/my model's; rm -rf x")
    line = [x for x in dryrun.plan(ctx)["node-a"] if x.startswith("exec") and " -m vllm." in x][0]
    words = shlex.split(line[len("exec"):])
    assert words[words.index("--model") + 1] == "/models/my model's; rm -rf x"


def test_local_embedded_fleet_writes_locally(tmp_path):
    from tests.conftest import write_local_fleet

    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="loc"))
    steps = dryrun.plan(ctx)
    a = steps["node-a"]
    assert a[0] == "check    bash -c true   (local)"
    assert f"write    {ctx.layout.root}/node-a-0/env.sh" in a
    engine = [x for x in a if x.startswith("exec") and "p2p-engine" in x][0]
    assert "--instance-id node-a-0" in engine and "CUDA_VISIBLE_DEVICES" not in engine
    assert not ctx.layout.root.exists(), "a dry run must not write the run folder"


def test_env_sh_is_read_only_in_the_format_p2pctl_writes():
    got = read_env_sh("export A=plain\nexport B='a b'\"'\"'c'\n# export C=no\nexport D=''\n"
                      "export E='$not_expanded'\nif true; then\n  export F=\"$DEV\"\nfi\nG=$(hostname)\n"
                      "export H=1 # why\nexport I=\n")
    assert got.env == {"A": "plain", "B": "a b'c", "D": "", "E": "$not_expanded"}
    assert [n for n, _ in got.foreign] == [6, 7, 8, 9, 10, 11]


def _edited(tmp_path, extra: str):
    from tests.conftest import write_local_fleet

    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="ed"))
    launch.render(ctx)
    env_sh = ctx.layout.env("node-a-0")
    env_sh.write_text(env_sh.read_text() + extra)
    return ctx


# Issue 31: each of these was shown as harmless by the old bash reader, yet bash ran it; an env.sh that sources
# itself made that reader loop.
@pytest.mark.parametrize("extra", ["LD_PRELOAD=/tmp/x.so\n", "exec() { :; }\n", "export PYTHONPATH=/tmp/evil\n",
                                   "set -- $(id)\n", "export BASH_ENV=/tmp/x\n", ": $(( a[$(id)] ))\n",
                                   '. "$(dirname "$BASH_SOURCE")/env.sh"\n', "${X:-$(id)}\n"])
def test_a_hand_edit_is_a_flagged_diff_and_never_changes_what_the_plan_says_runs(tmp_path, extra):
    ctx = _edited(tmp_path, extra)
    fresh = [x for x in dryrun.plan(ctx, only="node-a")["node-a"] if x.startswith("exec")]
    lines = dryrun.plan(ctx, only="node-a", rerender=False)["node-a"]
    differs = [i for i, x in enumerate(lines) if x.startswith("differs")]
    assert [lines[i].split()[1] for i in differs] == ["node-a-0/env.sh"]
    assert "NOT what p2pctl renders" in lines[differs[0]]
    assert f"+{extra.rstrip()}" in [x.strip() for x in lines]
    assert [x for x in lines if x.startswith("exec")] == fresh  # what runs comes from fleet.yaml, not the file


def test_a_planted_env_sh_is_never_sourced_by_the_dry_run(tmp_path):
    planted = tmp_path / "sourced"
    ctx = _edited(tmp_path, f"touch {planted}\nexport X=$(touch {planted}.2)\n")
    wrapper = ctx.layout.wrapper("node-a-0", "server")
    wrapper.write_text(wrapper.read_text().replace("\nexec ", f"\ntouch {planted}.3\nexec "))
    text = "\n".join(dryrun.plan(ctx, rerender=False)["node-a"])
    assert not list(tmp_path.glob("sourced*"))
    assert f"+touch {planted}.3" in text and "node-a-0/start_server.sh on disk is NOT" in text


@pytest.mark.parametrize("body,expected", [
    ({"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model"}]}, ["Qwen/Qwen3-8B"]),
    ({"data": []}, []), (None, []), ({"error": "x"}, []),
])
def test_served_models(body, expected):
    assert engine_api.served_models(body) == expected


def test_vllm_ready_needs_health_and_the_model(monkeypatch):
    import requests

    class R:
        def __init__(self, code):
            self.status_code = code

    answers = {"/health": 200}
    monkeypatch.setattr(requests, "get", lambda url, timeout, headers=None: R(answers.get(url[url.rindex("/"):], 404)))
    models = {"v": {"data": [{"id": "m"}]}}
    monkeypatch.setattr(fetch, "get_json", lambda url, timeout: models["v"])
    assert engine_api.vllm_ready("http://x:1", "m") and not engine_api.vllm_ready("http://x:1", "other")
    models["v"] = {"data": []}
    assert not engine_api.vllm_ready("http://x:1")
    answers["/health"] = 503
    models["v"] = {"data": [{"id": "m"}]}
    assert not engine_api.vllm_ready("http://x:1", "m")
    assert engine_api.engine_ready("embedded", "http://127.0.0.1:1") is False
