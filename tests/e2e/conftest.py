"""A real local fleet (coordinator, servers, CPU engines on loopback) for end-to-end tests.

`fleet2` is one healthy 2-node fleet for every e2e test that leaves it healthy: tests that only read it, and tests
that break one part and put it back in a `finally`. Starting a fleet costs half a minute of a 2-core box, so those
tests share one: they run first (in file order), the fleet starts at the first and goes down right after the last
(an idle fleet's servers still burn CPU in NIXL's progress threads). A test marked `breaks_fleet2(order)` leaves the
fleet broken; such tests run after every other user, by `order`, and the fleet goes down after the last of them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

E2E = Path(__file__).parent
_shared: dict = {"stack": None, "ctx": None, "last": None}


@contextlib.contextmanager
def running_fleet(tmp: Path, n_nodes: int = 2, name: str = "e2e", **overrides):
    """Up + wait, yield the FleetContext, and always down (also when up or a test fails)."""
    fleet_file = write_local_fleet(tmp / "fleet.yaml", n_nodes, name=name, **overrides)
    with FleetContext.load(fleet_file) as ctx, launch.running(ctx, timeout=90):
        yield ctx


def _uses_shared(item) -> bool:
    return "fleet2" in getattr(item, "fixturenames", ())


def _breaker_order(item) -> int:
    mark = item.get_closest_marker("breaks_fleet2")
    return mark.args[0] if mark else -1


def pytest_configure(config):
    config.addinivalue_line("markers", "breaks_fleet2(order): leaves the shared fleet broken; runs last of its users")


def pytest_collection_modifyitems(session, config, items):
    """The shared fleet's users first (breakers last, by order), then the other e2e tests; other tiers keep
    their place."""
    mine = [i for i, item in enumerate(items) if E2E in Path(item.fspath).parents]
    if not mine:
        return
    e2e = [items[i] for i in mine]
    users = sorted((t for t in e2e if _uses_shared(t)), key=_breaker_order)  # stable: file order otherwise
    rest = [t for t in e2e if not _uses_shared(t)]
    items[mine[0]:mine[-1] + 1] = users + rest
    _shared["last"] = users[-1].nodeid if users else None


def _stop_shared() -> None:
    stack, _shared["stack"], _shared["ctx"] = _shared["stack"], None, None
    if stack is not None:
        stack.close()


@pytest.fixture
def fleet2(tmp_path_factory):
    """The shared healthy 2-node fleet (see the module's docstring)."""
    if _shared["ctx"] is None:
        stack = contextlib.ExitStack()
        _shared["ctx"] = stack.enter_context(running_fleet(tmp_path_factory.mktemp("fleet2")))
        _shared["stack"] = stack
    return _shared["ctx"]


def pytest_runtest_teardown(item, nextitem):
    if item.nodeid == _shared["last"] or nextitem is None:
        _stop_shared()


def pytest_sessionfinish(session, exitstatus):
    _stop_shared()  # a run cut short (-x, a failed collection) still takes the fleet down
