"""The decision tree's data (`tree.yaml`) as types, and the matcher from what an operator types to a symptom."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from p2p_ops import files
from p2p_ops.diagnose.judge.catalogue import CAUSES
from p2p_ops.errors import BadInput
from p2p_ops.resources import tree_text


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str
    logs: tuple[str, ...]
    meaning: str
    # A line naming a peer that its server now lists among its peers is ruled out (a failure since recovered).
    ruled_out_by_peer: bool = False

    @property
    def regex(self) -> re.Pattern:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class Step:
    id: str
    ask: str
    cause: str
    fix: str
    checks: tuple[str, ...] = ()
    manual: tuple[str, ...] = ()


@dataclass(frozen=True)
class Symptom:
    id: str
    title: str
    aliases: tuple[str, ...]
    looks_like: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Tree:
    symptoms: tuple[Symptom, ...]
    signatures: dict[str, Signature]


def load_tree(path: Path | None = None) -> Tree:
    """The shipped tree (package data, so an installed wheel has it), or the YAML file at `path`."""
    data = yaml.safe_load(files.read_text(path) if path else tree_text())
    sigs = {k: Signature(k, v["pattern"], tuple(v["logs"]), v["meaning"], bool(v.get("ruled_out_by_peer")))
            for k, v in data["signatures"].items()}
    symptoms = tuple(Symptom(s["id"], s["title"], tuple(s.get("aliases", ())), s["looks_like"], tuple(
        Step(st["id"], st["ask"], *_cause_fix(st), tuple(st.get("checks", ())), tuple(st.get("manual", ())))
        for st in s["steps"])) for s in data["symptoms"])
    return Tree(symptoms, sigs)


def _cause_fix(step: dict) -> tuple[str, str]:
    """A step's own cause and fix, or those of the catalogue's causes it names (`causes: [id, ...]`)."""
    if "causes" not in step:
        return step["cause"], step["fix"]
    unknown = [c for c in step["causes"] if c not in CAUSES]
    if unknown:
        raise BadInput(f"tree step {step['id']}: causes {unknown} are not in the catalogue of causes "
                       "(p2p_ops/diagnose/judge/catalogue.py)")
    causes = [CAUSES[c] for c in step["causes"]]
    return ("; ".join(f"{c.id}: {c.means}" for c in causes) + ".",
            "; ".join(f"{c.id}: {c.fix}" for c in causes) + ".")


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def find_symptom(tree: Tree, text: str) -> Symptom:
    """Exact id/title/alias first, then the symptom sharing the most words with the text."""
    want = _norm(text)
    for s in tree.symptoms:
        if want in {_norm(s.id), _norm(s.title), *map(_norm, s.aliases)}:
            return s
    words = set(want.split())
    score, best = max(((max(len(words & set(_norm(n).split())) / max(1, len(set(_norm(n).split())))
                            for n in (s.id, s.title, *s.aliases)), s) for s in tree.symptoms), key=lambda x: x[0])
    if score >= 0.5:
        return best
    raise BadInput(f"no symptom matches {text!r}; known: " + "; ".join(f"'{s.title}'" for s in tree.symptoms)
                   + " (`p2pctl diagnose --list`)")
