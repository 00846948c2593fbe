"""Files that ship inside the package (templates, the decision tree), read through importlib.resources.

The templates live in the repo's top-level templates/ folder; pyproject maps that folder to the
`p2p_ops.templates` package, so the same lookup works from an editable install and a wheel. A checkout
that was never installed (p2p_ops imported from the source tree) falls back to the folder itself.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# The checkout this package was imported from (an editable install's source tree). Only checkout-relative
# defaults use it: the router's venv, the Makefile's install steps, the skills' generated references.
CHECKOUT = Path(__file__).resolve().parent.parent


def _templates():
    try:
        return resources.files("p2p_ops.templates")
    except ModuleNotFoundError:
        return CHECKOUT / "templates"


def template_text(name: str) -> str:
    return _templates().joinpath(name).read_text(encoding="utf-8")


def template_names() -> list[str]:
    return sorted(p.name for p in _templates().iterdir() if p.name.endswith(".j2"))


def tree_text() -> str:
    return resources.files("p2p_ops.diagnose.tree").joinpath("tree.yaml").read_text(encoding="utf-8")
