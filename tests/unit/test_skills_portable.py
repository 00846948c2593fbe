"""Skill folders work when copied out of the checkout (e.g. to ~/.claude/skills): their scripts find p2pctl
through $P2PCTL, $P2P_KV_OPS_HOME or PATH, and usage lines name the script the user ran."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_local_fleet

REPO = Path(__file__).resolve().parents[2]
SKILLS = REPO / ".claude" / "skills"
VENV_BIN = REPO / ".venv" / "bin"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    dest = tmp_path_factory.mktemp("home") / ".claude" / "skills"
    shutil.copytree(SKILLS, dest)
    return dest


def run(script: Path, *args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("P2PCTL", "P2P_KV_OPS_HOME", "VIRTUAL_ENV")}
    env["PATH"] = BASE_PATH
    env.update(env_extra or {})
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_locators_are_identical_in_every_skill():
    for name in ("p2pctl.sh", "_p2pctl.py"):
        copies = [p.read_text() for p in SKILLS.glob(f"*/scripts/{name}")]
        assert len(copies) >= 2 and len(set(copies)) == 1, name


def test_no_script_reaches_outside_its_skill_folder():
    for script in SKILLS.glob("*/scripts/*"):
        text = script.read_text()
        assert "../../" not in text and "parents[4]" not in text, script


@pytest.mark.parametrize("script,words", [
    ("lmcache-p2p-test/scripts/basic_test.py", ["usage: basic_test.py"]),
    ("lmcache-p2p-test/scripts/long_doc_qa.py", ["usage: long_doc_qa.py", "--document-length"]),
    ("lmcache-p2p-diagnose/scripts/parse_ucx_trace.py", ["usage: parse_ucx_trace.py"]),
])
def test_python_wrappers_use_p2pctl_on_path_and_name_themselves(copied, script, words):
    res = run(copied / script, "--help", env_extra={"PATH": f"{VENV_BIN}:{BASE_PATH}"})
    assert res.returncode == 0, res.stderr
    for w in words:
        assert w in res.stdout


def test_bad_option_error_names_the_script(copied):
    res = run(copied / "lmcache-p2p-launch/scripts/start_node.sh", "--bogus", env_extra={"P2PCTL": str(VENV_BIN / "p2pctl")})
    assert res.returncode == 2 and "start_node.sh: error: unrecognized arguments: --bogus" in res.stderr


def test_without_p2pctl_they_say_how_to_get_it(copied):
    for script in ("lmcache-p2p-launch/scripts/wait_ready.sh", "lmcache-p2p-test/scripts/basic_test.py"):
        res = run(copied / script)
        assert res.returncode == 2, res.stderr
        assert "p2pctl not found" in res.stderr and "P2P_KV_OPS_HOME" in res.stderr


def test_checkout_found_through_p2p_kv_ops_home(copied, tmp_path):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="skill")
    res = run(copied / "lmcache-p2p-launch/scripts/start_node.sh", "-f", str(fleet), "--dry-run", "--node", "node-b",
              "--role", "server", env_extra={"P2P_KV_OPS_HOME": str(REPO)}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "# node-b" in res.stdout and "# node-a" not in res.stdout
    assert "node-b-0/server" in res.stdout and "node-b-0/engine" not in res.stdout
    assert "start    coordinator" not in res.stdout


def test_start_node_help_documents_no_render_and_role():
    res = run(SKILLS / "lmcache-p2p-launch/scripts/start_node.sh", "--help")
    assert "--no-render" in res.stdout and "--role" in res.stdout


def test_skill_descriptions_stay_well_under_the_limit():
    import re

    import yaml

    for skill in SKILLS.glob("*/SKILL.md"):
        meta = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", skill.read_text(), re.S).group(1))
        assert len(meta["description"]) <= 900, skill


def test_test_skill_routes_to_longdoc():
    body = (SKILLS / "lmcache-p2p-test/SKILL.md").read_text()
    assert "scripts/long_doc_qa.py" in body and "p2pctl test longdoc" in body


def test_bundle_example_writes_inside_the_project():
    body = (SKILLS / "lmcache-p2p-diagnose/SKILL.md").read_text()
    assert "/tmp/" not in body
