"""The symptom decision tree (`p2pctl diagnose SYMPTOM`), its data in `tree.yaml`.

`model` (types, loader, matcher: what an operator types to a symptom), `evidence` (what checks read: doctor
facts, logs, metrics, gathered once and lazily), `checks` (the automated checks; add one there), `walk` (a
symptom's steps to a `Diagnosis`), `render` (text, and the skill's references/decision-tree.md).
"""
