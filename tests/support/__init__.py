"""Test support shared by the test tiers only: what the benchmarks also use lives outside tests/ (free ports in
p2p_ops/lifecycle/free_ports.py, the SSH testbed in bench/testbed.py), so nothing outside tests/ imports this."""
