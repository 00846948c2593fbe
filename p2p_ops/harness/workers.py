"""Closed-loop worker threads, as the fault and soak loads run them: N daemon threads on one target, one stop
event they all watch, and a join bounded by a request's timeout (a client stuck in a request never holds up
the run's end longer than that)."""

from __future__ import annotations

import threading
from typing import Callable


class Workers:
    def __init__(self, target: Callable[..., None], count: int, name: str, join_timeout_s: float,
                 pass_index: bool = False) -> None:
        self.stop_event = threading.Event()
        self.join_timeout_s = join_timeout_s
        self.threads = [threading.Thread(target=target, args=(i,) if pass_index else (), daemon=True,
                                         name=f"{name}-{i}") for i in range(count)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.join()

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=self.join_timeout_s)

    def done(self) -> bool:
        return not any(t.is_alive() for t in self.threads)
