"""`p2pctl test soak`: a fleet under a steady mixed load for minutes or hours, with leak figures (runner.py runs
it, leaks.py judges it)."""

from p2p_ops.harness.soak.options import SoakOptions, parse_duration
from p2p_ops.harness.soak.runner import run_soak
from p2p_ops.harness.soak.leaks import passed, soak_checks, soak_markdown, write_evidence

__all__ = ["SoakOptions", "parse_duration", "passed", "run_soak", "soak_checks", "soak_markdown", "write_evidence"]
