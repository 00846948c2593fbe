"""Memlock (`ulimit -l`, `/proc/<pid>/limits`) and kernel module (`lsmod`, `/proc/modules`) parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_ops.facts.limits import parse_modules, parse_proc_limits, parse_ulimit_l, read_memlock

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def read(name: str) -> str:
    return (FIX / "limits" / name).read_text()


@pytest.mark.parametrize("name,soft,hard,unlimited", [
    ("proc_limits_unlimited.txt", None, None, True),
    ("proc_limits_64k.txt", 65536, 65536, False),
    ("proc_limits_this_box.txt", 8388608, 8388608, False),
])
def test_proc_limits(name, soft, hard, unlimited):
    mem = parse_proc_limits(read(name))
    assert (mem.soft, mem.hard, mem.unlimited, mem.error) == (soft, hard, unlimited, None)


def test_ulimit_output_is_kib():
    assert parse_ulimit_l(read("ulimit_l_unlimited.txt")).unlimited
    assert parse_ulimit_l(read("ulimit_l_64.txt")).soft == 64 * 1024
    assert parse_ulimit_l("sh: ulimit: bad").error


def test_read_memlock_from_a_tree_and_a_missing_pid():
    assert read_memlock(FIX / "rdma" / "low_memlock" / "proc").soft == 65536
    assert "cannot read" in read_memlock(FIX / "rdma" / "low_memlock" / "proc", 424242).error


def test_modules_from_lsmod_and_proc_modules():
    assert "nvidia_peermem" in parse_modules(read("lsmod_peermem.txt"))
    assert "Module" not in parse_modules(read("lsmod_peermem.txt"))
    assert {"nvidia_peermem", "ib_uverbs", "mlx5_ib"} <= set(parse_modules(read("proc_modules_peermem.txt")))
    # lsmod in a container without /proc/modules prints errors, not modules
    assert parse_modules(read("lsmod_no_proc_modules.txt")) == []
