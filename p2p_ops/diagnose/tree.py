"""The symptom decision tree (`p2pctl diagnose SYMPTOM`): data in `tree.yaml`; this module is its public face.

`load_tree()` reads the data; `find_symptom()` maps what an operator types ("peers not registered", "l1_oom",
"NIXL_ERR_BACKEND") to a symptom; `diagnose()` walks its steps, runs each step's automated checks against an
`Evidence` (the fleet's doctor facts, logs, metrics and /status, gathered once and lazily) and returns what each
step found; `render_markdown()` writes the skill's `references/decision-tree.md`.

One concept a module: `tree_model` (types, loader, matcher), `tree_evidence` (what checks read), `tree_checks`
(the checks; add one there), `tree_walk` (a symptom's steps to a `Diagnosis`), `tree_render` (text, markdown).
"""

from p2p_ops.diagnose.tree_checks import CHECKS, DOCTOR_CHECKS, known_check, run_check
from p2p_ops.diagnose.tree_evidence import Evidence, Observation
from p2p_ops.diagnose.tree_model import Signature, Step, Symptom, Tree, find_symptom, load_tree
from p2p_ops.diagnose.tree_render import REFERENCE_MD, render_markdown, render_text
from p2p_ops.diagnose.tree_walk import Diagnosis, StepResult, diagnose

__all__ = [
    "CHECKS", "DOCTOR_CHECKS", "REFERENCE_MD", "Diagnosis", "Evidence", "Observation", "Signature", "Step",
    "StepResult", "Symptom", "Tree", "diagnose", "find_symptom", "known_check", "load_tree", "render_markdown",
    "render_text", "run_check",
]
