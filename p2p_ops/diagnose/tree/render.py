"""The tree as text: a diagnosis for the terminal, and the whole tree as the skill's reference page."""

from __future__ import annotations

from p2p_ops.causes import CAUSES, template
from p2p_ops.diagnose.tree.model import Tree
from p2p_ops.diagnose.tree.walk import Diagnosis


def render_text(d: Diagnosis) -> list[str]:
    lines = [f"diagnose: {d.title} (fleet {d.fleet})"] + [f"note: {n}" for n in d.notes]
    mark = {"problem": "PROBLEM", "ok": "ok", "n/a": "not applicable", "unknown": "not checked"}
    for n, s in enumerate(d.steps, 1):
        lines.append(f" {n}. {s.ask}  [{mark[s.verdict]}]")
        for o in s.observations:
            if o.status == "problem" or (s.verdict != "problem" and o.status in ("info", "unknown", "n/a")):
                lines.append(f"      - {o.subject}: {o.detail}")
                if o.cause and o.status == "problem":
                    means = CAUSES[o.cause.id].means
                    lines += [f"        cause {o.cause.id}" + ("" if means in o.detail else f": {means}"),
                              f"        fix: {o.fix}"]
        if s.manual and s.verdict != "ok":
            lines += [f"      run: {m}" for m in s.manual]
    got = d.likely()
    if got:
        step, obs = got
        lines.append(f"likely cause (step {d.steps.index(step) + 1}, evidence {obs.check}, cause "
                     f"{obs.cause.id if obs.cause else '-'}): {obs.subject}: {obs.detail}")
        lines.append(f"  fix: {obs.fix}")
    else:
        seen = d.seen()
        lines.append("no cause confirmed" + (f"; evidence seen: {'; '.join(seen[:8])}" if seen else "")
                     + ". Run the manual steps above, then `p2pctl bundle`")
    return lines


def render_markdown(tree: Tree) -> str:
    """references/decision-tree.md, generated: `p2pctl diagnose --markdown > <that file>`."""
    out = ["# Decision tree: symptom -> checks -> cause -> fix", "",
           "<!-- Generated from p2p_ops/diagnose/tree/tree.yaml by `p2pctl diagnose --markdown`; do not edit by hand. -->",
           "", "Run `scripts/diagnose.sh \"SYMPTOM\"` (or `p2pctl diagnose \"SYMPTOM\" -f fleet.yaml`): it walks the "
           "steps below in order, runs the automated checks of each step and prints what it found, the cause and "
           "the fix. `doctor:*` checks are findings of `scripts/doctor.sh`.", "", "## Symptoms", ""]
    out += [f"{n}. [{s.title}](#{s.id}) - `p2pctl diagnose \"{s.title}\"`" for n, s in enumerate(tree.symptoms, 1)]
    for s in tree.symptoms:
        out += ["", f"<a id=\"{s.id}\"></a>", f"## {s.title}", "", f"Looks like: {s.looks_like}", "",
                "Also matched by: " + ", ".join(f"`{a}`" for a in s.aliases), ""]
        for n, st in enumerate(s.steps, 1):
            out.append(f"{n}. **{st.ask}**")
            if st.checks:
                out.append("   - checks: " + ", ".join(
                    f"`{c}` (log line `{tree.signatures[c[4:]].pattern}`)" if c.startswith("log:") else f"`{c}`"
                    for c in st.checks))
            for m in st.manual:
                out.append(f"   - run: `{m}`")
            out += [f"   - cause `{c}`: {CAUSES[c].means}. Fix: {template(CAUSES[c].fix)}" for c in st.causes]
    out += ["", "## Log signatures", "", "Each names a cause of the catalogue (references/causes.md).", "",
            "| id | pattern (grep -E) | logs | cause |", "|---|---|---|---|"]
    pipe = "\\|"  # a literal | inside a table cell, even within a code span (GFM)
    out += [f"| `{g.id}` | `{g.pattern.replace('|', pipe)}` | {', '.join(g.logs) or '-'} | `{g.cause}` |"
            for g in tree.signatures.values()]
    return "\n".join(out) + "\n"
