"""Every skill in the repo follows the Agent Skills conventions; its wrappers answer --help with argparse's help (usage
naming the wrapper), and every flag the skills mention is a real flag of the verb it goes to."""

from __future__ import annotations

import ast
import functools
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


# --- wrappers delegate --help to argparse, and every flag the skills mention is a real one ----------------------

LOCATORS = {"p2pctl.sh", "_p2pctl.py"}
WRAPPERS = sorted(p for p in REPO.glob(".claude/skills/*/scripts/*") if p.suffix in (".sh", ".py")
                  and p.name not in LOCATORS)
FLAG = re.compile(r"^--?[A-Za-z][\w-]*$")
# A shell word that ends the command a mention started: a comment, `--` (what follows is another command's), a pipe
# or a list operator.
STOP = {"#", "--", "|", "||", "&&", ";"}


def wrapped_words(script: Path) -> tuple[str, ...]:
    """The p2pctl words a wrapper runs, e.g. start_prometheus.sh -> ("prometheus", "up")."""
    text = script.read_text()
    sh = re.search(r'^p2p_exec \S+ (.*?) "\$@"$', text, re.M)
    if sh:
        return tuple(sh.group(1).split())
    py = re.search(r"^\s*exec_p2pctl\((.*)\)$", text, re.M)
    assert py, f"{script} runs neither p2p_exec nor exec_p2pctl"
    return tuple(ast.literal_eval(f"({py.group(1)},)"))


WRAPPED = {w.name: wrapped_words(w) for w in WRAPPERS}


@functools.cache
def p2pctl_parser():
    from p2p_ops.cli import build_parser

    return build_parser()


def verb_flags(words: tuple[str, ...]) -> set[str] | None:
    """Every option string of the verb `words` select (and p2pctl's global flags); None if they name no verb."""
    from p2p_ops.cli import _leaf

    root = p2pctl_parser()
    leaf = _leaf(root, list(words))
    if leaf is root:
        return None
    return {o for p in (root, leaf) for a in p._actions for o in a.option_strings}


def mentioned_flags(text: str) -> list[tuple[tuple[str, ...], str, str]]:
    """(verb words, flag, line) for each flag an example passes to a wrapper (`scripts/start_node.sh --node`) or to
    p2pctl itself (`p2pctl test basic --chunks 8`), up to the end of that command on its line."""
    from p2p_ops.cli import _GLOBAL_FLAGS, _leaf

    root, out = p2pctl_parser(), []
    # Inline code (`scripts/start_node.sh --no-render`) ends at its backtick; `;` ends a shell command.
    segments = [(seg, line) for line in text.splitlines() for seg in line.replace(";", " ; ").split("`")]
    for segment, line in segments:
        words = [w.strip("[]\"'(),") for w in segment.split()]
        for i, word in enumerate(words):
            name = word.rsplit("/", 1)[-1]
            if name in WRAPPED:
                verb, rest = WRAPPED[name], words[i + 1:]
            elif word == "p2pctl":
                rest = [w for w in words[i + 1:] if w not in _GLOBAL_FLAGS]
                n = 0
                while n < len(rest) and _leaf(root, rest[:n + 1]) is not _leaf(root, rest[:n]):
                    n += 1
                if n == 0:
                    continue  # prose such as "p2pctl not found"
                verb, rest = tuple(rest[:n]), rest[n:]
            else:
                continue
            for w in rest:
                if w in STOP or w.startswith("#"):
                    break
                flag = w.split("=", 1)[0]
                if FLAG.match(flag):
                    out.append((verb, flag, line.strip()))
    return out


@pytest.mark.parametrize("script", WRAPPERS, ids=[w.name for w in WRAPPERS])
def test_wrapper_help_is_argparse_naming_the_wrapper(script):
    res = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{script.name} --help exited {res.returncode}: {res.stderr[-500:]}"
    assert res.stdout.startswith(f"usage: {script.name} "), res.stdout[:200]
    flags = verb_flags(WRAPPED[script.name])
    assert flags is not None, f"{script.name} runs `p2pctl {' '.join(WRAPPED[script.name])}`, which is no verb"
    usage = res.stdout.split("\n\n", 1)[0]
    shown = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", usage))
    assert shown and shown <= flags, f"{script.name}'s usage names {shown - flags}, which `p2pctl " \
                                     f"{' '.join(WRAPPED[script.name])}` does not take"


def test_wrappers_hand_write_no_usage():
    for script in WRAPPERS:
        text = script.read_text()
        assert "usage:" not in text.lower() and "<<'USAGE'" not in text, f"{script.name} writes its own usage"


DOCS = [*(s / "SKILL.md" for s in SKILLS), *sorted(REPO.glob(".claude/skills/*/references/*.md"))]


@pytest.mark.parametrize("source", [*DOCS, *WRAPPERS],
                         ids=[*(f"{d.parent.name}/{d.name}" for d in DOCS), *(w.name for w in WRAPPERS)])
def test_every_flag_the_skills_mention_is_a_real_flag(source):
    bad = [f"`{' '.join(verb)}` has no {flag}: {line}" for verb, flag, line in mentioned_flags(source.read_text())
           if flag not in (verb_flags(verb) or set())]
    assert not bad, "\n".join(bad)


def test_the_flag_check_sees_wrappers_and_p2pctl_and_stops_at_the_command_end():
    text = ("scripts/start_node.sh --node node-b --bogus   # p2pctl up --also-bogus\n"
            "scripts/rail_check.sh --expect mlx5_0 -- p2pctl test basic --chunks 8\n"
            "p2pctl not found: install it\n")
    found = [(verb, flag) for verb, flag, _ in mentioned_flags(text)]
    assert found == [(("up",), "--node"), (("up",), "--bogus"), (("up",), "--also-bogus"), (("rails",), "--expect"),
                     (("test", "basic"), "--chunks")]
    inline = mentioned_flags("keep it: `scripts/start_node.sh --no-render`; stop: `p2pctl down`, then `p2pctl "
                             "grafana -o x.json`; p2pctl status -q --json")
    assert [(v, f) for v, f, _ in inline] == [(("up",), "--no-render"), (("grafana",), "-o"),
                                              (("status",), "--json")]
    assert "--bogus" not in verb_flags(("up",)) and "--chunks" in verb_flags(("test", "basic"))
