"""Benchmarks across fleet variants: placement policies with P2P on and off, pull-vs-recompute calibration."""
