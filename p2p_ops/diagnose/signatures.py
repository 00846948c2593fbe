"""The log signatures (`signatures.yaml`), each defined once with the catalogue cause it names: the decision tree
greps the fleet's logs for them, explain reads the lookup timeouts, the NIXL failure rules classify a failed
transfer by them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import yaml

from p2p_ops.causes import CAUSES
from p2p_ops.resources import data_text


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str                  # read alike by grep -E and by Python's re
    cause: str
    logs: tuple[str, ...] = ()    # the fleet logs the tree greps for it (none: only a failed transfer's text)
    # A line naming a peer that its server now lists among its peers is ruled out (a failure since recovered).
    ruled_out_by_peer: bool = False
    # A doctor check that must find the same cause now for a line to confirm it: the line alone is history (it
    # stays in the log after the setting that made it was fixed) or anyone's words.
    confirmed_by: str = ""

    @cached_property
    def regex(self) -> re.Pattern:
        return re.compile(self.pattern)

    def search(self, line: str) -> Optional[re.Match]:
        """The signature in one log line; never in an HTTP access line, whose quoted request is a client's words."""
        return None if ACCESS_LINE.search(line) else self.regex.search(line)


# An HTTP server's access line (uvicorn's in the coordinator, the servers and the engines; a proxy's): the request
# it quotes (method, path, query) was written by whoever sent it, so `GET /Traceback (most recent call last)` is
# not a traceback.
# It ends `HTTP/1.1" 404 ...` whatever the request held: that end marks it (and stays linear on a huge line).
ACCESS_LINE = re.compile(r' HTTP/[0-9.]+" [1-5][0-9][0-9]\b')


def load(text: str) -> dict[str, Signature]:
    sigs = {k: Signature(k, v["pattern"], v["cause"], tuple(v.get("logs", ())), bool(v.get("ruled_out_by_peer")),
                         v.get("confirmed_by", "")) for k, v in yaml.safe_load(text).items()}
    if unknown := sorted(s.id for s in sigs.values() if s.cause not in CAUSES):
        raise ValueError(f"signatures {unknown} name a cause that is not in the catalogue (p2p_ops/causes/)")
    return sigs


SIGNATURES = load(data_text("p2p_ops.diagnose", "signatures.yaml"))
