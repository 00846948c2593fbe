"""`nvidia-smi topo -m` parser and closest-NIC choice on recorded matrices."""

from __future__ import annotations

from pathlib import Path

from p2p_ops.facts.topo import parse_topo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "topo"


def topo(name: str):
    return parse_topo((FIX / name).read_text())


def test_eight_gpus_eight_nics_with_ansi_header():
    t = topo("h100_8gpu_8nic_ansi.txt")
    assert t.gpus == [f"GPU{i}" for i in range(8)] and t.nics == [f"NIC{i}" for i in range(8)]
    assert t.rows["GPU2"]["NIC2"] == "PIX" and t.rows["GPU2"]["GPU2"] == "X" and t.rows["GPU2"]["NIC6"] == "SYS"
    assert t.nic_names["NIC7"] == "mlx5_7"
    assert t.cpu_affinity["GPU5"] == "56-111,168-223" and t.numa_affinity["GPU5"] == "1"
    assert t.closest_nics("GPU6") == ("PIX", ["mlx5_6"])


def test_single_gpu_has_no_nics():
    t = topo("single_gpu.txt")
    assert t.gpus == ["GPU0"] and t.nics == [] and t.cpu_affinity == {"GPU0": "0-31"}
    assert t.closest_nics("GPU0") == ("", [])


def test_legacy_driver_soc_and_nic_names_in_header():
    t = topo("legacy_soc.txt")
    assert t.nics == ["mlx4_0"] and t.nic_names == {}
    assert t.closest_nics("GPU0") == ("PHB", ["mlx4_0"])
    assert t.closest_nics("GPU1") == ("SYS", ["mlx4_0"])  # SOC is the old name of SYS


def test_bond_and_non_consecutive_legend_with_a_tie():
    t = topo("bond_nonconsecutive.txt")
    assert t.closest_nics("GPU0") == ("PIX", ["mlx5_bond_0"])
    assert t.closest_nics("GPU1") == ("PXB", ["mlx5_3", "mlx5_7"])


def test_no_matrix_is_an_error():
    t = topo("nvidia_smi_missing.txt")
    assert t.columns == [] and t.error.startswith("NVIDIA-SMI has failed")
