"""`p2pctl test soak`: a fleet under a steady mixed load for minutes or hours, with leak figures.

options.py (the run and the leak rule), load.py (the mixed load, L1 to steady state), sampler.py
(per-process samples), runner.py (the run), verdict.py (the checks, from slopes, the leak rule and TTFT per
minute, and the evidence)."""

from p2p_ops.harness.soak.options import SoakOptions, parse_duration
from p2p_ops.harness.soak.runner import run_soak
from p2p_ops.harness.soak.verdict import passed, soak_checks, soak_markdown, write_evidence

__all__ = ["SoakOptions", "parse_duration", "passed", "run_soak", "soak_checks", "soak_markdown", "write_evidence"]
