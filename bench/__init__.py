"""The benchmark lab: `make bench` (suite/) and the SSH testbed (testbed.py). A development package of the
repository, not part of the installed tool: nothing in p2p_ops or p2p_runtime imports it."""
