"""Files that ship inside the package (templates, the decision tree, the log signatures), and where the checkout and the paths a
user gives point. pyproject maps the repo's top-level templates/ folder to the `p2p_ops.templates` package, which
is what a wheel reads.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

# The checkout this package was imported from (an editable install's source tree). Only checkout-relative
# defaults use it: the router's venv, the Makefile's install steps, the skills' generated references.
CHECKOUT = Path(__file__).resolve().parent.parent


def given_path(text: str | Path) -> Path:
    """A path a user gave (a flag, an environment variable), made absolute from the caller's working directory
    once, where it is read: what it is handed to may run elsewhere (inference-perf runs in its output folder, an
    engine in its run folder), where a relative path would name another place (issue 47)."""
    return Path(os.path.abspath(Path(text).expanduser()))


def env_path(var: str, default: Path) -> Path:
    """$var as `given_path` reads it, else `default` (the checkout's own venv of a tool, say)."""
    value = os.environ.get(var)
    return given_path(value) if value else default


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


def data_text(package: str, name: str) -> str:
    """A data file of a package (the decision tree, the log signatures)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")
