"""Free ports for whatever starts its own processes: the first offset of the default plan whose ports are all
free, an offset that is refused in one line when a port is taken, and the line (and JSON) that says which way
the ports were chosen."""

from __future__ import annotations

import contextlib
import socket

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.lifecycle import free_ports
from p2p_ops.spec.settings import RouterSettings


@contextlib.contextmanager
def listening(port: int, host: str = "127.0.0.1"):
    with socket.socket() as s:
        # as the servers and port_free do: a port some earlier fleet left in TIME_WAIT is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen()
        yield


def test_a_chosen_plan_has_every_planned_port_free_and_the_router_laid_out_as_the_spec_does():
    base = free_ports.choose(3, router=True).base
    ports = free_ports.planned_ports(base, 3)
    assert len(ports) == len(set(ports)) == 1 + 4 * 3 + 2 + 2 * 3
    assert all(free_ports.port_free(p) for p in ports)
    router = RouterSettings(**free_ports.router_ports(base))
    assert router.kv_event_ports(2) == (base["kv_events"] + 4, base["kv_events"] + 5)
    last = free_ports.offset_base(free_ports.OFFSET_LIMIT - free_ports.OFFSET_STEP, router=True)
    assert max(free_ports.planned_ports(last, 8)) < 32768  # below the ephemeral range at every offset tried


def test_a_free_port_is_free_on_every_address():
    port = free_ports.free_port(["127.0.0.1", "127.0.0.2"])
    assert free_ports.port_free(port, "127.0.0.1") and free_ports.port_free(port, "127.0.0.2")


def test_the_search_skips_an_offset_with_a_taken_port_and_says_it_picked():
    first = free_ports.choose(2)
    assert first.picked and first.offset % free_ports.OFFSET_STEP == 0
    with listening(first.base["engine"] + 2):  # node-b's engine port
        again = free_ports.choose(2)
        assert again.offset != first.offset
    assert again.line().startswith(f"picked free ports: the default plan + {again.offset}")
    assert again.to_json() == {"how": "free", "offset": again.offset, "base": again.base}


def test_a_port_offset_is_taken_as_given_and_refused_in_one_line_when_a_port_is_in_use():
    off = free_ports.choose(2, router=True).offset
    given = free_ports.choose(2, offset=off, router=True)
    assert not given.picked and given.base == free_ports.offset_base(off, router=True)
    assert given.base["router"] == RouterSettings().port + off
    assert "(--port-offset)" in given.line() and f"router {given.base['router']}" in given.line()
    with listening(given.base["router_prometheus"]):
        with pytest.raises(BadInput, match=rf"--port-offset {off}: port {given.base['router_prometheus']} is in use"):
            free_ports.choose(2, offset=off, router=True)


def test_an_offset_out_of_range_is_refused():
    with pytest.raises(BadInput, match="out of range"):
        free_ports.choose(2, offset=60000, router=True)
