"""A wheel built from this checkout works outside it: templates and the decision tree are package data.

The wheel is installed with --no-deps into a fresh venv in a temporary folder; the dependencies come from this
project's venv through a .pth line, so the test needs no network and no big install.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {str(p.parent.relative_to(REPO)).replace("/", ".")
             for top in ("p2p_ops", "p2p_runtime") for p in (REPO / top).rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert "p2p_ops.templates" in listed


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin folder of a fresh venv holding only the wheel, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of what the sdist holds, so setuptools' build/ and egg-info stay out of the checkout
    # (a stale build/lib would otherwise leak deleted modules into later wheels).
    src = tmp / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("p2p_ops", "p2p_runtime", "templates"):
        shutil.copytree(REPO / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    dist = tmp / "dist"
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                "-w", str(dist), str(src)])
    assert res.returncode == 0, res.stderr[-2000:]
    wheel = next(dist.glob("p2p_kv_ops-*.whl"))
    venv = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    res = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q",
                "--no-deps", str(wheel)])
    assert res.returncode == 0, res.stderr[-2000:]
    # Dependencies from this venv; appended after the fresh venv's own site-packages, so the wheel wins.
    fresh_site = next((venv / "lib").glob("python3*/site-packages"))
    (fresh_site / "zz_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    work = tmp / "work"
    work.mkdir()
    return venv / "bin", work


def _outside_env() -> dict:
    """The caller's environment without what would point imports back at a checkout (PYTHONPATH, a venv)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _p2pctl(installed, *args):
    bin_dir, work = installed
    return _run([str(bin_dir / "p2pctl"), *args], cwd=work, env=_outside_env())


def test_wheel_imports_from_itself_not_the_checkout(installed):
    bin_dir, work = installed
    res = _run([str(bin_dir / "python"), "-c",
                "import p2p_ops, p2p_ops.templates; print(p2p_ops.__file__); print(p2p_ops.templates.__file__)"],
               cwd=work, env=_outside_env())
    assert res.returncode == 0, res.stderr
    for line in res.stdout.split():
        assert str(REPO) not in line and "site-packages" in line


def test_wheel_runs_the_launch_and_diagnose_verbs(installed):
    _, work = installed
    res = _p2pctl(installed, "--version")
    assert res.returncode == 0 and res.stdout.startswith("p2pctl "), res.stderr
    assert _p2pctl(installed, "init", "--local", "2").returncode == 0
    res = _p2pctl(installed, "validate", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["instances"] == 2
    res = _p2pctl(installed, "render", "--json")
    assert res.returncode == 0, res.stderr
    files = [Path(p) for p in json.loads(res.stdout)["files"]]
    assert any(p.name == "start_server.sh" for p in files) and all(p.is_file() for p in files)
    assert "lmcache" in (work / "p2p-run/local/node-a-0/start_server.sh").read_text()
    res = _p2pctl(installed, "diagnose", "--list")
    assert res.returncode == 0, res.stderr
    assert "peers not registered" in res.stdout.lower()
    res = _p2pctl(installed, "up", "--dry-run")
    assert res.returncode == 0 and "exec " in res.stdout, res.stderr
