"""Small statistics shared by the report, its plots and the fault harness (stdlib only, no plotting)."""

from __future__ import annotations

from typing import Optional


def percentile(values: list[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (q in 0..100); None for no data."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    pos = (len(vals) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)
