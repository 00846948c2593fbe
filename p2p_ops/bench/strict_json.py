"""Benchmark documents as strict JSON: a figure that was never measured (NaN, inf) becomes null, so `jq` and
other strict readers take the results.json files and the verbs' --json output."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
