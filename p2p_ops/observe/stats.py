"""Small statistics shared by the report, its plots, the benchmarks and the fault harness (stdlib only)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """The percentile q (0..100) of `values` (None and NaN skipped), interpolated linearly between the two
    nearest ranks; None for no data.

    The project's one definition, in every report, plot and benchmark: numpy's default (type 7, `statistics`'
    "inclusive"), which is what `vllm bench serve` reports, so our p50/p99 sit beside its figures unchanged.
    """
    vals = sorted(v for v in values if v is not None and v == v)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100.0
    lo = int(pos)
    if pos == lo:   # a rank itself: that value, exactly (an int stays an int)
        return vals[lo]
    return vals[lo] + (vals[lo + 1] - vals[lo]) * (pos - lo)


def median(values: Iterable[Optional[float]], default: Optional[float] = None) -> Optional[float]:
    """percentile 50; `default` for no data."""
    return default if (m := percentile(values, 50)) is None else m


def fmt(v: Optional[float], spec: str = "{:g}", scale: float = 1.0, none: str = "-") -> str:
    """A figure in a table cell, `scale`d: `none` when there is none."""
    return none if v is None else spec.format(v * scale)


def span(values: Iterable[Optional[float]]) -> Optional[list[float]]:
    """[min, max] of the finite `values` (None and NaN skipped); None for no data."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return [min(vals), max(vals)] if vals else None


def with_spread(mid: float, spread: Optional[Sequence[float]], spec: str = "{:.0f}") -> str:
    """A figure over repeats as every benchmark shows it: the median (`mid`), then the repeats' min-max when they
    differ, "412 (300-500)"; `spec` formats all three."""
    cell = spec.format(mid)
    if spread and spread[0] != spread[1]:
        cell += f" ({spec.format(spread[0])}-{spec.format(spread[1])})"
    return cell


def straddles(spread: Optional[Sequence[float]], threshold: float) -> bool:
    """Whether repeats whose min-max is `spread` lie on both sides of `threshold` (lo < threshold < hi), so that
    the median's side is chance; a repeat equal to it is on neither side, so a range that only touches it decides."""
    return bool(spread) and spread[0] < threshold < spread[1]


def finite(value: Any) -> Any:
    """A benchmark document as strict JSON: a figure never measured (NaN, inf) becomes null, so `jq` and other
    strict readers take the results.json files and the verbs' --json output."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
