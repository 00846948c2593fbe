"""Test support shared by the test tiers and the benchmarks (not shipped: the product package is p2p_ops)."""
