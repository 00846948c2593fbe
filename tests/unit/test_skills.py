"""Every skill in the repo follows the Agent Skills conventions and its scripts answer --help."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SKILLS = sorted(p.parent for p in (REPO / ".claude" / "skills").glob("*/SKILL.md"))
ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
NAME_RULE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def frontmatter(skill: Path) -> tuple[dict, str]:
    text = (skill / "SKILL.md").read_text()
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, f"{skill.name}/SKILL.md has no YAML frontmatter"
    return yaml.safe_load(m.group(1)), m.group(2)


def named_scripts(skill: Path) -> list[Path]:
    _, body = frontmatter(skill)
    names = sorted(set(re.findall(r"(?<![/\w])scripts/([A-Za-z0-9_.-]+\.(?:sh|py))", body)))
    return [skill / "scripts" / n for n in names]


def test_there_are_skills():
    assert {s.name for s in SKILLS} >= {"lmcache-p2p-launch"}


@pytest.mark.parametrize("skill", SKILLS, ids=[s.name for s in SKILLS])
def test_frontmatter(skill):
    meta, body = frontmatter(skill)
    assert set(meta) <= ALLOWED_KEYS, f"unexpected keys {set(meta) - ALLOWED_KEYS}"
    assert meta["name"] == skill.name
    assert NAME_RULE.match(meta["name"]) and len(meta["name"]) <= 64
    desc = meta["description"]
    assert isinstance(desc, str) and 0 < len(desc) <= 1024
    assert "<" not in desc and ">" not in desc
    assert len(body.splitlines()) < 500


@pytest.mark.parametrize("skill", SKILLS, ids=[s.name for s in SKILLS])
def test_named_scripts_exist_are_executable_and_answer_help(skill):
    scripts = named_scripts(skill)
    assert scripts, f"{skill.name}/SKILL.md names no scripts"
    for script in scripts:
        assert script.is_file(), f"{skill.name}/SKILL.md names {script.name}, which does not exist"
        assert script.stat().st_mode & 0o111, f"{script} is not executable"
        res = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{script} --help exited {res.returncode}: {res.stderr[-500:]}"
        assert "usage" in (res.stdout + res.stderr).lower()


@pytest.mark.parametrize("skill", SKILLS, ids=[s.name for s in SKILLS])
def test_referenced_reference_files_exist(skill):
    _, body = frontmatter(skill)
    for ref in set(re.findall(r"references/([A-Za-z0-9_.-]+\.md)", body)):
        assert (skill / "references" / ref).is_file(), f"{skill.name} names missing references/{ref}"


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (.ci/run installs it)")
def test_shell_scripts_pass_shellcheck():
    scripts = [str(p) for p in REPO.glob(".claude/skills/*/scripts/*.sh")] + \
              [str(p) for p in (REPO / "scripts").glob("*.sh")]
    res = subprocess.run(["shellcheck", "-x", *scripts], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
