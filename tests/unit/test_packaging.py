"""A wheel built from this checkout works outside it: templates and the decision tree are package data; and its
core install is a control host's, without the node runtime (DESIGN decision 10).

The wheel is installed with --no-deps into a fresh venv in a temporary folder; the dependencies come from this
project's venv through a .pth line, so the test needs no network and no big install. The light install itself is
checked by running p2pctl with the extras' packages made unimportable.
"""

from __future__ import annotations

import ast
from email.parser import Parser
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
import zipfile

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
def wheel(tmp_path_factory) -> Path:
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
    return next(dist.glob("p2p_kv_ops-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """(bin folder of a fresh venv holding only the wheel, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("venv")
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


# ---- a light control host -----------------------------------------------------------------------------------

# What only nodes, the engine, the charts or the tests need (the extras): never a core requirement.
NODE_AND_LAB = {"torch", "lmcache", "nixl", "nixl-cu12", "fastapi", "uvicorn", "starlette", "pyzmq", "msgspec",
                "matplotlib", "numpy", "pandas", "transformers", "tokenizers", "schemathesis", "hypothesis", "pytest"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _requires(wheel: Path) -> tuple[set[str], dict[str, set[str]]]:
    """(core requirement names, {extra: its requirement names}) from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
    core, extras = set(), {}
    for req in meta.get_all("Requires-Dist") or []:
        extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", req)
        (extras.setdefault(extra.group(1), set()) if extra else core).add(_name(req))
    return core, extras


def test_the_core_install_has_no_node_runtime_and_the_extras_have_it(wheel):
    core, extras = _requires(wheel)
    assert core & NODE_AND_LAB == set(), "move these to an extra ([engine], [node], [plots] or [dev])"
    assert {"fabric", "paramiko", "invoke", "prometheus-api-client"} <= core
    assert {"torch", "fastapi", "uvicorn", "pyzmq", "msgspec"} <= extras["engine"]
    assert {"p2p-kv-ops", "lmcache", "nixl-cu12"} <= extras["node"]      # the node extra includes the engine's
    assert extras["plots"] == {"matplotlib"}
    assert {"pytest", "hypothesis", "schemathesis"} <= extras["dev"]


def _imported_top_modules() -> set[str]:
    found = set()
    for top in ("p2p_ops", "p2p_runtime"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.partition(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {"p2p_ops", "p2p_runtime", "__future__"}


def test_every_imported_package_is_declared(wheel):
    """What the code imports is declared by this project (core or an extra), not left to another package's
    requirements (paramiko and invoke came with fabric until they were listed)."""
    core, extras = _requires(wheel)
    declared = core.union(*extras.values())
    dists = importlib.metadata.packages_distributions()
    missing = {}
    # The `nixl` module's package requires both CUDA variants; the node installs it with --no-deps after
    # nixl-cu12 (the Makefile's setup lines, README's node lines), so no extra can name it.
    for module in _imported_top_modules() - {"nixl"}:
        names = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        assert names, f"{module} is imported but not installed in this venv"
        if not names & declared:
            missing[module] = sorted(names)
    assert missing == {}, "declare these in pyproject.toml (core or the extra that uses them)"


# Run with the extras' packages unimportable, as on a control host that installed only `pip install p2p-kv-ops`.
_LIGHT = textwrap.dedent("""
    import sys
    BLOCKED = {blocked!r}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

    sys.meta_path.insert(0, Blocker())
    from p2p_ops.cli import main
    code = main(sys.argv[1:])
    leaked = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    assert not leaked, leaked
    sys.exit(code)
""")
_BLOCKED = sorted({"torch", "lmcache", "nixl", "nixl_cu12", "fastapi", "uvicorn", "starlette", "zmq", "msgspec",
                   "matplotlib", "numpy", "pandas", "transformers", "tokenizers", "schemathesis", "hypothesis"})


def _light_p2pctl(work: Path, *args: str):
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return _run([sys.executable, "-c", _LIGHT.format(blocked=_BLOCKED), *args], cwd=work, env=env)


def test_a_control_host_without_the_extras_launches_and_checks_a_fleet(tmp_path):
    for args in (["init", "--local", "2"], ["validate"], ["render"], ["up", "--dry-run"], ["diagnose", "--list"],
                 ["grafana", "-o", "dashboard.json"]):
        res = _light_p2pctl(tmp_path, *args)
        assert res.returncode == 0, (args, res.stderr[-2000:])
    assert (tmp_path / "p2p-run/local/node-a-0/env.sh").is_file() and (tmp_path / "dashboard.json").is_file()
    # Nothing running: status and down answer, from the core install alone.
    res = _light_p2pctl(tmp_path, "status", "--json")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert json.loads(res.stdout)
    assert _light_p2pctl(tmp_path, "down").returncode == 0


def test_a_verb_that_needs_an_extra_names_it_in_one_line(tmp_path):
    res = _light_p2pctl(tmp_path, "make-model", str(tmp_path / "model"))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "p2pctl make-model: this needs transformers, which is not installed here: pip install 'p2p-kv-ops[node]'"]
