"""Small statistics shared by the report, its plots and the fault harness (stdlib only, no plotting)."""

from __future__ import annotations

from typing import Iterable, Optional


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """The percentile q (0..100) of `values` (None entries skipped), interpolated linearly between the two
    nearest ranks; None for no data.

    The project's one definition, in every report, plot and benchmark: numpy's default (type 7, `statistics`'
    "inclusive"), which is what `vllm bench serve` reports, so our p50/p99 sit beside its figures unchanged.
    """
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    pos = (len(vals) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def fmt(v: Optional[float], spec: str = "{:g}", scale: float = 1.0, none: str = "-") -> str:
    """A figure in a table cell, `scale`d: `none` when there is none."""
    return none if v is None else spec.format(v * scale)
