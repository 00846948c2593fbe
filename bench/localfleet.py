"""A temporary local fleet on free loopback ports, always taken down (the servers busy-poll a core)."""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import yaml

if TYPE_CHECKING:
    from p2p_ops.lifecycle.context import FleetContext


@contextmanager
def local_fleet(n: int, name: str = "bench", instance_settings: Optional[list[dict[str, Any]]] = None,
                timings: Optional[dict[str, float]] = None, **fleet_overrides: Any) -> Iterator[FleetContext]:
    """Yield a launched FleetContext of n embedded-engine nodes; `instance_settings[i]` overrides node i.

    `timings` (if given) receives the seconds `up` and `wait` took.
    """
    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext
    from p2p_ops.spec.starter import local_fleet as fleet_data
    from tests.conftest import free_port_base

    data = fleet_data(n, name=name, base=free_port_base(n))
    for i, extra in enumerate(instance_settings or []):
        if extra:
            data["nodes"][i]["instances"][0]["settings"] = dict(extra)
    for key, value in fleet_overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        path = Path(tmp) / "fleet.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        with FleetContext.load(path) as ctx:
            try:
                t = time.monotonic()
                launch.up(ctx)
                up_s = time.monotonic() - t
                launch.wait(ctx, timeout=180)
                if timings is not None:
                    timings.update(up_s=up_s, wait_s=time.monotonic() - t - up_s)
                yield ctx
            finally:
                launch.down(ctx)
