"""Room on disk: free space where a node keeps its run folder, and whether a model is in its Hugging Face cache."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from p2p_ops.facts.base import ABSENT, CommandFact


@dataclass(frozen=True)
class Disk:
    mount: str
    total_bytes: int
    avail_bytes: int


def parse_df(text: str) -> Optional[Disk]:
    """`df -Pk PATH`: the POSIX format, sizes in KiB, one data line (long device names do not wrap)."""
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[1].isdecimal() and parts[3].isdecimal():
            return Disk(" ".join(parts[5:]), int(parts[1]) * 1024, int(parts[3]) * 1024)
    return None


def disk_fact(path: str) -> CommandFact[Optional[Disk]]:
    """Free space of the file system that holds `path`, or will once it exists (its nearest existing parent)."""
    body = (f'p={shlex.quote(path)}; i=0; while [ ! -e "$p" ] && [ $i -lt 64 ]; do p=$(dirname "$p"); '
            'i=$((i+1)); done; df -Pk "$p"')
    return CommandFact("disk", ("sh", "-c", body), parse_df)


@dataclass(frozen=True)
class ModelCache:
    present: bool
    path: str
    snapshots: tuple[str, ...] = ()


def parse_model_cache(text: str) -> Optional[ModelCache]:
    """`present PATH` + snapshot names, or `absent PATH`; None when not checked (embedded runtime)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0] == ABSENT:
        return None
    word, _, path = lines[0].partition(" ")
    return ModelCache(word == "present", path, tuple(lines[1:]) if word == "present" else ())


def hf_cache_dir_name(model: str) -> str:
    """`Qwen/Qwen3-8B` -> `models--Qwen--Qwen3-8B`."""
    return "models--" + model.replace("/", "--")


def model_cache_fact(model: Optional[str]) -> CommandFact[Optional[ModelCache]]:
    q = shlex.quote
    if model is None:
        body = f"echo {ABSENT}"
    elif model.startswith(("/", "~", "./")):
        body = f'd={q(model)}; if [ -d "$d" ]; then echo "present $d"; else echo "absent $d"; fi'
    else:
        body = ('hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"; '
                f'd="$hub"/{q(hf_cache_dir_name(model))}; '
                'if [ -d "$d/snapshots" ]; then echo "present $d"; ls -1 "$d/snapshots"; '
                'else echo "absent $d"; fi')
    return CommandFact("model_cache", ("sh", "-c", body), parse_model_cache)
