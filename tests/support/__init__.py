"""Test support shared by the test tiers only: what the benchmarks also use (free ports, the SSH testbed) is
product code in p2p_ops (lifecycle/free_ports.py, bench/testbed.py), so nothing outside tests/ imports this."""
