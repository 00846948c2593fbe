"""Files that ship inside the package (templates, the decision tree). pyproject maps the repo's top-level
templates/ folder to the `p2p_ops.templates` package, which is what a wheel reads.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# The checkout this package was imported from (an editable install's source tree). Only checkout-relative
# defaults use it: the router's venv, the Makefile's install steps, the skills' generated references.
CHECKOUT = Path(__file__).resolve().parent.parent


def _templates():
    # A checkout's own templates/ first: the package it was imported from is this very source tree (an
    # editable install maps `p2p_ops.templates` to whichever tree was installed last, maybe another checkout).
    # An installed wheel has no templates/ beside the package and reads its package data.
    here = CHECKOUT / "templates"
    if (here / "prometheus.yml.j2").is_file() and (CHECKOUT / "p2p_ops").is_dir():
        return here
    return resources.files("p2p_ops.templates")


def template_text(name: str) -> str:
    return _templates().joinpath(name).read_text(encoding="utf-8")


def tree_text() -> str:
    return resources.files("p2p_ops.diagnose.tree").joinpath("tree.yaml").read_text(encoding="utf-8")
