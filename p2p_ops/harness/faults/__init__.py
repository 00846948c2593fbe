"""Faults with figures (`p2pctl test faults`): break one part of a running fleet under load, mend it, and
measure what it cost. runner.py runs them and writes their figures; scenarios.py holds the faults (network
faults on the node's own interface included); drain.py the in-flight counts."""

from p2p_ops.harness.faults.core import FaultOptions, Figures
from p2p_ops.harness.faults.runner import passed, run_faults, run_scenario, table_markdown
from p2p_ops.harness.faults.scenarios import parse_scenarios, why_not

__all__ = ["FaultOptions", "Figures", "parse_scenarios", "passed", "run_faults", "run_scenario", "table_markdown",
           "why_not"]
