"""One vocabulary of causes (issue 40): every cause any verb, tree step, doctor check, rdma or NIXL rule names is a
cause of the catalogue (`p2p_ops.causes`), each fix is written there once, each log signature and each metric
name is defined once, and the diagnose skill's table of causes is the catalogue's."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml

from p2p_ops.causes import CAUSES, SCOPES, Cause, template, verdict
from p2p_ops.diagnose.findings import Finding, Report
from p2p_ops.diagnose.nixl.failures import RULES
from p2p_ops.diagnose.signatures import SIGNATURES
from p2p_ops.diagnose.tree import model
from p2p_ops.spec.agreement import MUST_AGREE

REPO = Path(__file__).resolve().parents[2]
PRODUCT = sorted((REPO / "p2p_ops").rglob("*.py"))
CATALOGUE = REPO / "p2p_ops" / "causes"
# Calls that name a cause by a literal id, and which positional argument it is (or its keyword `cause`).
NAMING_CALLS = {"verdict": 0, "said": 0, "_why": 1, "_because": 2, "add": 5, "MustAgree": 1, "_metric_gauge": 4,
                "_known": 3}


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in PRODUCT]


def _docstrings(tree: ast.Module) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def _strings(tree: ast.Module) -> list[str]:
    """Every string literal but docstrings (f-strings: their literal parts)."""
    skip = _docstrings(tree)
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip]


def _named_ids() -> list[tuple[str, str]]:
    """(where, id) of every cause named by a literal in a naming call of the product."""
    out = []
    for path, tree in _trees():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name not in NAMING_CALLS:
                continue
            args = list(call.args)
            pos = NAMING_CALLS[name]
            arg = args[pos] if len(args) > pos else next((k.value for k in call.keywords if k.arg == "cause"), None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value:
                out.append((f"{path.relative_to(REPO)}:{call.lineno}", arg.value))
    return out


def test_every_cause_says_what_it_means_its_fix_its_scope_and_how_specific_it_is():
    text = (CATALOGUE / "catalogue.yaml").read_text()
    assert len(CAUSES) == len(re.findall(r"^\w+:", text, flags=re.M)) > 100      # each once
    for c in CAUSES.values():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", c.id) and c.means and c.fix and c.scope in SCOPES, c
        assert -1 <= c.rank <= 3 and c.fix.count("{") == c.fix.count("}"), c
        assert not hasattr(c, "confirms") and not hasattr(c, "rules_out")     # the rules hold that evidence


def test_a_scope_outside_the_known_ones_is_refused_with_the_cause_named():
    with pytest.raises(ValueError, match="cause x: scope must be one of"):
        Cause("x", "everywhere", "m", "f")


def test_a_verdict_renders_its_fix_for_the_subject_and_refuses_an_id_outside_the_catalogue():
    v = verdict("server_down", "node-a-0", ("doctor:process", "dead"), instance="node-a-0", restart="p2pctl up")
    assert v.fix.startswith("read node-a-0/server.log") and "p2pctl up" in v.fix and v.scope == "instance"
    assert v.to_dict() == {"id": "server_down", "subject": "node-a-0", "evidence": [
        {"source": "doctor:process", "seen": "dead"}], "fix": v.fix, "scope": "instance", "confirmed": True}
    assert "{restart}" in verdict("server_down", "x").fix      # a value not known stays its placeholder
    with pytest.raises(KeyError, match="not a cause of the catalogue"):
        verdict("keys_differ", "node-a-0")


def test_every_cause_a_product_call_names_by_a_literal_is_in_the_catalogue():
    named = _named_ids()
    assert len(named) > 120, named[:5]
    assert [(where, c) for where, c in named if c not in CAUSES] == []


def test_every_tree_step_signature_must_agree_key_and_nixl_rule_names_catalogue_causes():
    tree = model.load_tree()
    assert all(st.causes and set(st.causes) <= set(CAUSES) for s in tree.symptoms for st in s.steps)
    assert {s.cause for s in SIGNATURES.values()} <= set(CAUSES)
    assert {m.cause for m in MUST_AGREE} <= set(CAUSES)
    assert set(RULES) <= set(SIGNATURES) and len(set(RULES)) == len(RULES)


def test_no_fix_is_written_outside_the_catalogue():
    """A fix is the catalogue's alone: a tree step, a signature and a must-agree key name causes; a finding's fix is
    its verdict's; no product code passes `fix=` words or keeps a table of fixes."""
    data = yaml.safe_load((REPO / "p2p_ops/diagnose/tree/tree.yaml").read_text())
    steps = [st for s in data["symptoms"] for st in s["steps"]]
    assert not [st["id"] for st in steps if {"cause", "fix"} & set(st)]
    sigs = yaml.safe_load((REPO / "p2p_ops/diagnose/signatures.yaml").read_text())
    assert not [k for k, v in sigs.items() if {"meaning", "fix"} & set(v)]
    assert "fix" not in inspect.signature(Report.add).parameters
    assert isinstance(inspect.getattr_static(Finding, "fix"), property)
    assert "fix" not in {f for f in MUST_AGREE[0].__dataclass_fields__}
    for path, tree in _trees():
        if CATALOGUE in path.parents:
            continue
        where = path.relative_to(REPO)
        fixes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "fix"
                 and isinstance(n.value, (ast.Constant, ast.JoinedStr))]
        tables = [t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name) and re.search(r"(^|_)FIX(ES)?$", t.id)]
        assert not fixes and not tables, (where, fixes, tables)


def test_every_cause_of_the_catalogue_is_one_something_names():
    """No dead entry: a rule, a check, a signature, a tree step or a must-agree key names each cause (the reasons
    of LMCache's own prefetch-failure counter by the counter's label)."""
    text = "".join(p.read_text() for p in PRODUCT if CATALOGUE not in p.parents)
    text += (REPO / "p2p_ops/diagnose/tree/tree.yaml").read_text()
    text += (REPO / "p2p_ops/diagnose/signatures.yaml").read_text()
    measured = {"l1_oom", "l1_contended", "not_found"}
    assert [c for c in CAUSES if c not in measured and not re.search(rf"\b{c}\b", text)] == []


def _alternatives(pattern: str) -> set[str]:
    return {a for a in pattern.split("|") if len(a) > 6}


def test_each_log_signature_is_defined_once():
    """A signature's pattern lives in signatures.yaml alone: no product literal repeats it or one of its
    alternatives (explain's lookup timeouts and the NIXL failure rules read the signatures by id)."""
    patterns = {s.id: _alternatives(s.pattern) for s in SIGNATURES.values()}
    owners: dict[str, str] = {}
    for sid, alts in patterns.items():
        for a in alts:
            assert a not in owners, f"{a!r} is in both {owners[a]} and {sid}"
            owners[a] = sid
    twice = [(str(path.relative_to(REPO)), lit) for path, tree in _trees() for lit in _strings(tree)
             if _alternatives(lit) & set(owners)]
    assert twice == []


METRIC = re.compile(r"\b(lmcache_mp_\w+|p2p_engine_\w+|vllm:\w+)")


def test_each_metric_name_is_defined_once_in_the_metrics_api():
    home = REPO / "p2p_ops/endpoints/metrics_api.py"
    names = [n.value.value for n in ast.parse(home.read_text()).body if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str) and METRIC.match(n.value.value)]
    assert len(names) == len(set(names)) > 20
    elsewhere = [(str(path.relative_to(REPO)), m.group(1)) for path, tree in _trees() if path != home
                 for lit in _strings(tree) for m in [METRIC.search(lit)] if m]
    assert elsewhere == []


def markdown() -> str:
    """The table of every cause, as the diagnose skill's references/causes.md ends."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    return "\n".join(["| id | scope | means | fix |", "|---|---|---|---|"] + [
        f"| `{c.id}` | {c.scope} | {cell(c.means)}{'' if c.confirmed else ' (confirms no reason)'} | "
        f"{cell(template(c.fix))} |" for c in CAUSES.values()]) + "\n"


def test_the_diagnose_skill_lists_every_cause_as_the_catalogue_has_it():
    page = (REPO / ".claude/skills/lmcache-p2p-diagnose/references/causes.md").read_text()
    assert page.endswith(markdown()), (
        "references/causes.md is stale; regenerate its table with:\n  python -c 'from tests.unit.test_vocabulary "
        "import markdown; print(markdown(), end=\"\")' and replace the table at the end of the file")
    skill = (REPO / ".claude/skills/lmcache-p2p-diagnose/SKILL.md").read_text()
    assert "references/causes.md" in skill
