"""A temporary local fleet, always taken down (the servers busy-poll a core): what the benchmark suite and
`p2pctl calibrate --launch` measure on."""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import yaml

from p2p_ops import files
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import free_base
from p2p_ops.spec.starter import local_fleet as fleet_data
from p2p_runtime.profiles import TINY


@contextmanager
def local_fleet(n: int, name: str = "bench", instance_settings: Optional[list[dict[str, Any]]] = None,
                timings: Optional[dict[str, float]] = None, base: Optional[dict[str, int]] = None,
                where: Optional[Path] = None, progress: Callable[[str], None] = lambda _: None,
                profile: str = TINY, **fleet_overrides: Any) -> Iterator[FleetContext]:
    """Yield a launched FleetContext of n embedded-engine nodes; `instance_settings[i]` overrides node i.

    The engines store KV at `profile`'s geometry (`init --profile`). Ports come from `base` (default: a random free one). The spec and the fleet's run folder go under `where`
    when given (kept: the logs are evidence), else under a temporary folder removed afterwards. `timings`
    (if given) receives the seconds `up` and `wait` took.
    """
    data = fleet_data(n, name=name, base=base or free_base(n), profile=profile)
    for i, extra in enumerate(instance_settings or []):
        if extra:
            data["nodes"][i]["instances"][0]["settings"] = dict(extra)
    for key, value in fleet_overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    with _folder(name, where) as folder:
        path = folder / "fleet.yaml"
        files.write_text(path, yaml.safe_dump(data, sort_keys=False))
        with FleetContext.load(path) as ctx:
            try:
                t = time.monotonic()
                launch.up(ctx, progress=progress)
                up_s = time.monotonic() - t
                launch.wait(ctx, timeout=180, progress=progress)
                if timings is not None:
                    timings.update(up_s=up_s, wait_s=time.monotonic() - t - up_s)
                yield ctx
            finally:
                launch.down(ctx, progress=progress)


@contextmanager
def _folder(name: str, where: Optional[Path]) -> Iterator[Path]:
    if where is not None:
        files.make_dirs(where)
        yield where
        return
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        yield Path(tmp)
