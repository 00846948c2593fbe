"""One side of the NIXL probe, run as its own process: `python -m p2p_ops.diagnose.nixl.peer ROLE RDV ...`.

Roles: `target` owns a seeded buffer and publishes its agent metadata and buffer descriptor as files in the
rendezvous directory RDV (written to a temp name, then renamed, so a reader never sees half a file); `initiator`
READs it into a zeroed buffer, checks every byte against the same seed and times each post; `solo` only creates an
agent, so its UCX INFO log shows which lanes UCX would use. No NIXL listener thread is started (it binds 0.0.0.0):
metadata travels through the files.

Each role writes `<role>.json` into RDV (stage reached, timings, or the exception's class and message); UCX and
NIXL log to the process's stdout/stderr, which the parent captures. The process ends with `os._exit` because
nixl 1.5.1 crashes (SIGSEGV) in interpreter teardown after an agent was created, which would hide the result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from p2p_ops import files

SEED = 7
POLL_S = 0.005


def _wait_for(path: Path, deadline: float) -> bytes:
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_bytes()
        time.sleep(POLL_S)
    raise TimeoutError(f"timed out waiting for {path.name} from the target agent")


def _pattern(size: int):
    import numpy as np

    return np.random.default_rng(SEED).integers(0, 256, size, dtype=np.uint8)


def _agent(name: str):
    from nixl._api import nixl_agent, nixl_agent_config

    return nixl_agent(name, nixl_agent_config(enable_prog_thread=True, enable_listen_thread=False,
                                              backends=["UCX"]))


def run_target(rdv: Path, size: int, deadline: float, state: dict) -> None:
    state["stage"] = "create_agent"
    agent = _agent("target")
    state["stage"] = "register_memory"
    buf = _pattern(size)
    reg = agent.register_memory([(buf.ctypes.data, size, 0, "")], "DRAM")
    descs = agent.get_xfer_descs([(buf.ctypes.data, size, 0)], "DRAM")
    files.write_bytes(rdv / "target.desc", agent.get_serialized_descs(descs))
    files.write_bytes(rdv / "target.meta", agent.get_agent_metadata())
    state["stage"] = "serve"
    while time.monotonic() < deadline and not (rdv / "stop").exists():
        notifs = agent.get_new_notifs()
        if any(b"done" in m for msgs in notifs.values() for m in msgs):
            break
        time.sleep(POLL_S)
    agent.deregister_memory(reg)
    state["stage"] = "finished"


def _read_once(agent, handle, dst, expected, deadline: float) -> float:
    dst[:] = 0  # zeroed before every post, so each verified post proves bytes really moved
    start = time.perf_counter()
    status = agent.transfer(handle)
    while status == "PROC":
        if time.monotonic() > deadline:
            raise TimeoutError("timed out waiting for the READ to complete (state PROC)")
        status = agent.check_xfer_state(handle)
    elapsed = time.perf_counter() - start
    if status != "DONE":
        raise RuntimeError(f"transfer ended in state {status}")
    if not (dst == expected).all():
        bad = int((dst != expected).sum())
        raise ValueError(f"data mismatch: {bad} of {dst.size} bytes differ after the READ")
    return elapsed


def run_initiator(rdv: Path, size: int, iterations: int, deadline: float, state: dict) -> None:
    import numpy as np

    state["stage"] = "create_agent"
    agent = _agent("initiator")
    state["stage"] = "register_memory"
    dst = np.zeros(size, dtype=np.uint8)
    reg = agent.register_memory([(dst.ctypes.data, size, 0, "")], "DRAM")
    expected = _pattern(size)
    state["stage"] = "exchange_metadata"
    remote_addr = agent.deserialize_descs(_wait_for(rdv / "target.desc", deadline))[0][0]
    peer = agent.add_remote_agent(_wait_for(rdv / "target.meta", deadline))
    state["stage"] = "initialize_xfer"
    handle = agent.initialize_xfer("READ", agent.get_xfer_descs([(dst.ctypes.data, size, 0)], "DRAM"),
                                   agent.get_xfer_descs([(remote_addr, size, 0)], "DRAM"), peer, b"")
    state["backend"] = str(agent.query_xfer_backend(handle))
    state["stage"] = "transfer"
    state["seconds"] = []
    for _ in range(iterations):
        state["seconds"].append(_read_once(agent, handle, dst, expected, deadline))
        state["bytes_checked"] = state.get("bytes_checked", 0) + size
    state["stage"] = "cleanup"
    agent.release_xfer_handle(handle)
    agent.send_notif(peer, b"done")
    agent.remove_remote_agent(peer)
    agent.deregister_memory(reg)
    state["stage"] = "finished"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nixl_peer", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["target", "initiator", "solo"])
    parser.add_argument("rdv", type=Path)
    parser.add_argument("--size", type=int, default=16 << 20)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    state: dict = {"role": args.role, "ok": False, "pid": os.getpid()}
    try:
        if args.role == "target":
            run_target(args.rdv, args.size, deadline, state)
        elif args.role == "initiator":
            run_initiator(args.rdv, args.size, args.iterations, deadline, state)
        else:
            state["stage"] = "create_agent"
            _agent("solo")
            state["stage"] = "finished"
        state["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as data
        state.update(exc_class=type(exc).__name__, exc_module=type(exc).__module__, message=str(exc),
                     traceback=traceback.format_exc(limit=4)[-2000:])
    files.write_bytes(args.rdv / f"{args.role}.json", json.dumps(state).encode())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if state["ok"] else 1)


if __name__ == "__main__":
    main()
