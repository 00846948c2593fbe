"""The decision tree's data (`tree.yaml`) as types, and the matcher from what an operator types to a symptom."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from p2p_ops import files
from p2p_ops.causes import CAUSES
from p2p_ops.diagnose.signatures import SIGNATURES, Signature
from p2p_ops.errors import BadInput
from p2p_ops.resources import data_text


@dataclass(frozen=True)
class Step:
    id: str
    ask: str
    causes: tuple[str, ...]           # what it looks for: ids of the catalogue (p2p_ops/causes/)
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
    signatures: dict[str, Signature]      # the log signatures its `log:` checks grep (signatures.yaml)


def load_tree(path: Path | None = None) -> Tree:
    """The shipped tree (package data, so an installed wheel has it), or the YAML file at `path`."""
    data = yaml.safe_load(files.read_text(path) if path else data_text("p2p_ops.diagnose.tree", "tree.yaml"))
    symptoms = tuple(Symptom(s["id"], s["title"], tuple(s.get("aliases", ())), s["looks_like"], tuple(
        Step(st["id"], st["ask"], _causes(st), tuple(st.get("checks", ())), tuple(st.get("manual", ())))
        for st in s["steps"])) for s in data["symptoms"])
    return Tree(symptoms, SIGNATURES)


def _causes(step: dict) -> tuple[str, ...]:
    unknown = [c for c in step.get("causes") or [] if c not in CAUSES]
    if unknown or not step.get("causes"):
        raise BadInput(f"tree step {step['id']}: name the causes it looks for from the catalogue (p2p_ops/causes/)"
                       + (f"; not in it: {unknown}" if unknown else ""))
    return tuple(step["causes"])


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
