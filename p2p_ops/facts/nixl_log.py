"""NIXL log lines: the C++ core (glog style), the Python layer, vLLM's NIXL lines and NIXL exceptions.

    I0801 15:40:05.042247    1049 config.cpp:43] Modified UCX config: MAX_RMA_RAILS=2
    E [nixl_agent.cpp:484] registerMem: registration failed for the specified or all potential backends
    2026-11-30 01:21:46 NIXL INFO    _api.py:281 Initialized NIXL agent: A
    INFO 05-01 17:58:04 [nixl_utils.py:20] Setting UCX_RCACHE_MAX_UNRELEASED to '1024' ...
    nixl_cu12._bindings.nixlBackendError: NIXL_ERR_BACKEND
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEVERITY = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "FATAL", "WARNING": "WARN", "CRITICAL": "FATAL"}
_GLOG = re.compile(
    r"^(?P<level>[IWEF])(?P<md>\d{4}) (?P<t>\d\d:\d\d:\d\d\.\d+)\s+(?P<tid>\d+) (?P<file>[\w.+-]+):(?P<line>\d+)\]"
    r" (?P<msg>.*)$"
)
_GLOG_SHORT = re.compile(r"^(?P<level>[IWEF]) \[(?P<file>[\w.+-]+):(?P<line>\d+)\] (?P<msg>.*)$")
_PYTHON = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? NIXL (?P<level>[A-Z]+)\s+(?P<file>[\w.+-]+):(?P<line>\d+)"
    r" (?P<msg>.*)$"
)
_VLLM = re.compile(
    r"^(?:\([^)]*\)\s*)?(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"\[(?P<file>[\w.+-]+):(?P<line>\d+)\] (?P<msg>.*)$"
)
# Bounded: searched across whole lines, `nixl[A-Za-z]+` would rescan a run of letters from every `nixl` in it.
_EXCEPTION = re.compile(r"(?P<cls>nixl[A-Za-z]{1,60}Error): (?P<code>NIXL_ERR_[A-Z_]{1,60})")
_MODIFIED = re.compile(r"Modified UCX config: (?P<key>\w+)=(?P<value>\S*)")


@dataclass
class NixlLine:
    source: str
    level: str
    message: str
    file: str = ""
    line: int = 0
    tid: int = 0

    @property
    def exception(self) -> tuple[str, str] | None:
        m = _EXCEPTION.search(self.message)
        return (m["cls"], m["code"]) if m else None

    @property
    def modified_ucx_config(self) -> tuple[str, str] | None:
        m = _MODIFIED.search(self.message)
        return (m["key"], m["value"]) if m else None


def parse_nixl_line(text: str) -> NixlLine | None:
    text = text.rstrip("\n")
    for source, pattern in (("core", _GLOG), ("core", _GLOG_SHORT), ("python", _PYTHON), ("vllm", _VLLM)):
        m = pattern.match(text)
        # vLLM's format is every vLLM line's: only those that name NIXL are NIXL lines.
        if m and (source != "vllm" or "nixl" in m["file"].lower() or "nixl" in m["msg"].lower()):
            return NixlLine(source, _SEVERITY.get(m["level"], m["level"]), m["msg"], m["file"], int(m["line"]),
                            int(m.groupdict().get("tid") or 0))
    return NixlLine("exception", "ERROR", text.strip()) if _EXCEPTION.search(text) else None
