"""Rail check: counter snapshots from sysfs trees, pure diffs, and the findings on recorded snapshot pairs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from p2p_ops.cli import main
from p2p_ops.diagnose.rails import RailUsage, Snapshot, assess, diff, snapshot

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"
RAILS = FIX / "rails"


def load(name: str) -> Snapshot:
    return Snapshot.from_dict(json.loads((RAILS / name).read_text()))


def problems(report):
    return sorted((f.severity, f.check, f.subject) for f in report.problems)


def test_snapshot_multiplies_ib_words_by_four_and_reads_netdevs():
    snap = snapshot(FIX / "rdma" / "ib_healthy" / "sys", host="node-a")
    rail = snap.counters["mlx5_2:1"]
    assert (rail.kind, rail.tx_bytes, rail.rx_bytes, rail.link_layer) == ("rdma", 1002 * 10**6 * 4,
                                                                          2002 * 10**6 * 4, "InfiniBand")
    assert snap.counters["eno1"].kind == "net" and snap.counters["eno1"].tx_bytes == 10**9


def test_snapshot_roce_port_knows_its_netdev_and_round_trips():
    snap = snapshot(FIX / "rdma" / "roce_healthy" / "sys", host="node-r")
    assert snap.counters["rocep65s0f0:1"].netdev == "ens1f0np0"
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_diff_is_pure_and_flags_resets():
    usage = {u.name: u for u in diff(load("ib4_before.json"), load("ib4_after_counter_reset.json"))}
    assert usage["mlx5_0:1"].tx_bytes == 1 << 30 and not usage["mlx5_0:1"].reset
    assert usage["mlx5_2:1"].reset and usage["mlx5_2:1"].total == 0


def test_balanced_four_rails_are_healthy():
    report = assess(diff(load("ib4_before.json"), load("ib4_after_balanced.json")))
    assert report.exit_code == 0
    assert "mlx5_0:1 4.0 GiB (25%)" in next(f.message for f in report.findings if f.check == "traffic")


def test_single_rail_carrying_everything_is_imbalance():
    report = assess(diff(load("ib4_before.json"), load("ib4_after_single_rail.json")),
                    expected=["mlx5_0", "mlx5_1"])
    assert problems(report) == [("warn", "imbalance", "mlx5_1:1")]
    # eno1 moved only 48 KiB: below the threshold, not an unexpected rail
    assert "8.0 GiB on mlx5_0:1" in report.problems[0].value


def test_tcp_fallback_shows_up_as_an_unexpected_interface():
    report = assess(diff(load("ib4_before.json"), load("ib4_after_tcp_fallback.json")),
                    expected=["mlx5_0:1", "mlx5_1:1"])
    assert problems(report) == [("warn", "imbalance", "mlx5_1:1"), ("warn", "unexpected_rail", "eno1")]
    assert "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1" in next(f.fix for f in report.problems if f.subject == "eno1")


def test_counter_reset_missing_rail_and_idle_window():
    reset = assess(diff(load("ib4_before.json"), load("ib4_after_counter_reset.json")))
    assert ("warn", "counter_reset", "mlx5_2:1") in problems(reset)
    missing = assess(diff(load("ib4_before.json"), load("ib4_after_balanced.json")), expected=["mlx5_9"])
    assert ("error", "expected_rail", "mlx5_9") in problems(missing)
    idle = assess(diff(load("ib4_before.json"), load("ib4_before.json")))
    assert problems(idle) == [("warn", "traffic", "rails")]


def test_netdev_rails_by_name_and_roce_netdev_alias():
    usage = [RailUsage("rocep65s0f0:1", "rdma", 3 << 30, 0, "ens1f0np0"), RailUsage("ens9f0np0", "net", 3 << 30, 0)]
    assert assess(usage, expected=["ens1f0np0", "ens9f0np0"]).exit_code == 0


def test_cli_with_snapshot_files(capsys):
    code = main(["rails", "--before", str(RAILS / "ib4_before.json"), "--after",
                           str(RAILS / "ib4_after_single_rail.json"), "--expect", "mlx5_0,mlx5_1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["facts"]["window"] == "from snapshot files"
    assert [r["name"] for r in data["facts"]["rails"]] == ["eno1", "mlx5_0:1", "mlx5_1:1"]


@pytest.mark.parametrize("argv", [["rails", "--after", "x.json"], ["rails", "--before", "/nope.json"],
                                  ["rails", "--sysfs-root", "/nope"]])
def test_cli_bad_input(argv):
    assert main(argv) == 2


def test_cli_live_loopback_window(tmp_path, capsys):
    # A real local window on this machine's counters: a command pushes bytes through lo between the snapshots.
    snap = tmp_path / "before.json"
    assert main(["rails", "--save-snapshot", str(snap)]) == 0
    assert "lo" in json.loads(snap.read_text())["counters"]
    capsys.readouterr()
    pump = "\n".join([  # a loopback-only server on a port from this project's test range 21700-21799
        "import socket",
        "for port in range(21700, 21800):",
        "    try:",
        "        s = socket.create_server(('127.0.0.1', port)); break",
        "    except OSError:",
        "        continue",
        "c = socket.create_connection(s.getsockname(), timeout=10); d, _ = s.accept(); d.settimeout(10)",
        "for _ in range(64):",
        "    c.sendall(b'x' * 65536); d.recv(1 << 20)",
    ])
    code = main(["rails", "--expect", "lo", "--json", "--timeout", "60", "--", sys.executable, "-c", pump])
    data = json.loads(capsys.readouterr().out)
    lo = next(r for r in data["facts"]["rails"] if r["name"] == "lo")
    assert code == 0 and lo["total"] >= 1 << 20
