"""Whether paths exist on a node, as `test` sees them there: an interpreter is executable, a model folder holds
its config, a previous log is kept. Many paths are tested in one command."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from p2p_ops.facts.base import CommandFact

TESTS = {"exists": "-e", "file": "-f", "executable": "-x", "dir": "-d"}
# Reaching the node at all (its shell answers): what `up` checks on every node before anything starts.
NODE_ANSWERS: CommandFact[bool] = CommandFact("node_answers", ("true",), lambda _: True)


def parse_paths(text: str, paths: list[str]) -> dict[str, bool]:
    answers = [line.strip() == "yes" for line in text.splitlines() if line.strip() in ("yes", "no")]
    return {p: (answers[i] if i < len(answers) else False) for i, p in enumerate(paths)}


def paths_fact(wanted: Mapping[str, str]) -> CommandFact[dict[str, bool]]:
    """{path: "exists" | "file" | "executable" | "dir"} -> {path: whether it is so}."""
    paths = list(wanted)
    cmd = "; ".join(f"if [ {TESTS[kind]} {shlex.quote(path)} ]; then echo yes; else echo no; fi"
                    for path, kind in wanted.items())
    return CommandFact("paths", ("sh", "-c", cmd or "true"), lambda text: parse_paths(text, paths))
