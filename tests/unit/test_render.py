"""env.sh and wrapper rendering: golden files pin the output; values reach the shell intact."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from p2p_ops.lifecycle.render import fleet_runs, render_fleet
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
# A vLLM flag value with spaces, quotes and a glob: it must reach vLLM as one word.
GEN_CONFIG = '{"stop": ["*.md", "end of text"]}'


def golden_fleet(runtime: str = "embedded"):
    data = local_fleet(2, name="golden", runtime=runtime)
    for node in data["nodes"]:
        node["venv"] = "/opt/p2p/.venv"
    if runtime == "vllm":
        # A GPU fleet: the CPU variant is what `init --runtime vllm` writes (tested with real vLLM).
        data["model"] = "Qwen/Qwen3-8B"
        data["vllm"] = {"device": "cuda", "venv": "/opt/vllm", "gpu_memory_utilization": 0.8,
                        "args": ["--max-num-seqs", "8", "--override-generation-config", GEN_CONFIG]}
        for i, node in enumerate(data["nodes"]):
            node["instances"][0]["gpu"] = i
            node["instances"][0].pop("cpus", None)
    return parse_fleet(data)


def rendered(runtime: str) -> dict[str, str]:
    layout = RunLayout(Path("/srv/p2p-run/golden"))
    return {f"{runtime}/{f.unit}/{f.name}": f.text for f in render_fleet(golden_fleet(runtime), lambda n: layout)}


@pytest.mark.parametrize("runtime", ["embedded", "vllm"])
def test_rendered_files_match_golden(runtime):
    files = rendered(runtime)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for rel, text in files.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_text(text)
    expected = sorted(str(p.relative_to(GOLDEN)) for p in (GOLDEN / runtime).rglob("*") if p.is_file())
    assert sorted(files) == expected
    for rel, text in files.items():
        assert text == (GOLDEN / rel).read_text(), f"{rel} differs from its golden file (UPDATE_GOLDEN=1 to refresh)"


def test_env_sh_carries_the_peer_settings_and_hygiene():
    env = rendered("embedded")["embedded/node-a-0/env.sh"]
    for line in ("export PYTHONHASHSEED=0", "export LMCACHE_TRACK_USAGE=false", "export LMCACHE_CHUNK_SIZE=256",
                 "export LMCACHE_L1_ALIGN_BYTES=65536", "export LMCACHE_P2P_ADVERTISE_URL=127.0.0.1:8551",
                 "export LMCACHE_COORDINATOR_URL=http://127.0.0.1:9300", "export LMCACHE_HOST=127.0.0.1"):
        assert line in env
    coord = rendered("embedded")["embedded/coordinator/env.sh"]
    assert "export LMCACHE_MP_COORDINATOR_HOST=127.0.0.1" in coord


def test_vllm_wrapper_passes_the_mp_connector_config():
    files = rendered("vllm")
    env = files["vllm/node-b-0/env.sh"]
    assert "export CUDA_VISIBLE_DEVICES=1" in env
    assert '"kv_connector":"LMCacheMPConnector"' in env and '"lmcache.mp.port":5602' in env
    assert '"lmcache.mp.host":"tcp://127.0.0.1"' in env
    assert "-m vllm.entrypoints.openai.api_server" in files["vllm/node-b-0/start_engine.sh"]


def test_awkward_values_reach_the_shell_intact(tmp_path):
    data = local_fleet(1, name="q")
    weird = str(tmp_path / "it's a \"venv\"; echo pwned")
    data["nodes"][0]["venv"] = weird
    fleet = parse_fleet(data)
    layout = RunLayout(tmp_path / "run dir")
    env = next(f.text for f in render_fleet(fleet, lambda n: layout) if f.name == "env.sh" and f.unit != "coordinator")
    script = tmp_path / "env.sh"
    script.write_text(env)
    out = subprocess.run(["bash", "-c", f'source "{script}"; printf %s "$P2P_BIN_DIR|$P2P_RUN_DIR"'],
                         capture_output=True, text=True, check=True)
    assert out.stdout == f"{weird}/bin|{tmp_path / 'run dir' / 'node-a-0'}"
    assert "pwned" not in out.stdout.replace(weird, "")


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (CI installs it)")
def test_rendered_wrappers_pass_shellcheck(tmp_path):
    for runtime in ("embedded", "vllm"):
        for rel, text in rendered(runtime).items():
            path = tmp_path / rel.replace("/", "_")
            path.write_text(text if text.startswith("#!") else "#!/usr/bin/env bash\n" + text)
            res = subprocess.run(["shellcheck", "-x", str(path)], capture_output=True, text=True)
            assert res.returncode == 0, f"{rel}:\n{res.stdout}"


@pytest.mark.parametrize("which", ["embedded", "vllm", "router"])
def test_each_wrapper_runs_exactly_the_command_line_built_in_python(tmp_path, which):
    """bash itself sources each rendered env.sh and reads each wrapper (its command turned into a printf of its
    words) and gets the argv `fleet_runs` built: the one source the dry run prints."""
    from tests.unit.test_router_spec import router_fleet

    fleet = parse_fleet(router_fleet("vllm")) if which == "router" else golden_fleet(which)
    layout = RunLayout(tmp_path / "run")
    runs = fleet_runs(fleet, lambda n: layout)
    for f in render_fleet(fleet, lambda n: layout):
        (tmp_path / f.unit).mkdir(exist_ok=True)
        text = f.text
        if f.name.startswith("start_"):
            for start in ("exec ", '"$P2P_ROUTER_BIN"'):  # the router's wrapper does not exec it
                text = text.replace("\n" + start, "\nprintf '%s\\0' " + start.removeprefix("exec "))
        (tmp_path / f.unit / f.name).write_text(text)
    for folder, run in runs.items():
        for role, argv in ((r, run.command(r)) for r in run.argv):
            res = subprocess.run(["bash", str(tmp_path / folder / f"start_{role}.sh")], capture_output=True,
                                 env={"PATH": "/usr/bin:/bin"}, check=True)
            assert res.stdout.decode().split("\0")[:-1] == list(argv), f"{folder}/{role}"
    assert "router" in runs or which != "router"


def test_vllm_args_reach_vllm_as_separate_unexpanded_words():
    argv = list(fleet_runs(golden_fleet("vllm"), lambda n: RunLayout(Path("/srv")))["node-a-0"].command("engine"))
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "Qwen/Qwen3-8B"
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen3-8B"
    assert "--enable-prompt-tokens-details" in argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    # Spaces, quotes and a glob in one value: one word, not split, not expanded.
    assert argv[-4:] == ["--max-num-seqs", "8", "--override-generation-config", GEN_CONFIG]


def test_cpu_vllm_fleet_sizes_the_kv_cache_binds_threads_and_stays_offline(tmp_path):
    model = tmp_path / "tiny model"
    data = local_fleet(2, name="cpu", runtime="vllm", cpu_count=2,
                       vllm={"model_path": str(model), "venv": "/opt/vllm"})
    fleet = parse_fleet(data)
    layout = RunLayout(tmp_path / "run")
    files = {(f.unit, f.name): f.text for f in render_fleet(fleet, lambda n: layout)}
    env_b = files[("node-b-0", "env.sh")]
    for line in ("export VLLM_CPU_KVCACHE_SPACE=1", "export VLLM_CPU_OMP_THREADS_BIND=1",
                 "export HF_HUB_OFFLINE=1", "export PYTHONHASHSEED=0", "export VLLM_NO_USAGE_STATS=1"):
        assert line in env_b
    assert "CUDA_VISIBLE_DEVICES" not in env_b
    argv = list(fleet_runs(fleet, lambda n: layout)["node-b-0"].command("engine"))
    assert argv[argv.index("--model") + 1] == str(model)
    assert argv[argv.index("--served-model-name") + 1] == "tiny-llm"
    assert {"--enable-prompt-tokens-details", "--enforce-eager"} <= set(argv)
    assert argv[argv.index("--max-model-len") + 1] == "4096"


def test_run_folder_is_private(tmp_path):
    """env.sh (keys), wrappers and the folders holding logs and pidfiles: the owner only."""
    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext
    from tests.conftest import write_local_fleet

    ctx = FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="private"))
    ctx.layout.root.mkdir(parents=True, mode=0o755)
    ctx.layout.root.chmod(0o755)  # a run folder made before the rule is tightened too
    launch.render(ctx)
    assert ctx.layout.root.stat().st_mode & 0o777 == 0o700
    for unit in ("coordinator", "node-a-0", "node-b-0"):
        assert ctx.layout.dir(unit).stat().st_mode & 0o777 == 0o700, unit
        assert ctx.layout.env(unit).stat().st_mode & 0o777 == 0o600, unit
    assert ctx.layout.wrapper("node-a-0", "server").stat().st_mode & 0o777 == 0o700
