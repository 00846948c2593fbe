"""Map a failed NIXL/UCX transfer to its likely cause, from the exception and the UCX/NIXL log lines.

`classify(text)` tries the log signatures of `RULES` in order (specific before generic) against the exception
(`Class: message`) followed by the WARN/ERROR log messages; the first that matches names the catalogue's cause,
with the line it matched as the evidence. Add a rule: a signature in `diagnose/signatures.yaml`, named here.
"""

from __future__ import annotations

from typing import Optional

from p2p_ops.causes import Verdict, restart, verdict
from p2p_ops.diagnose.signatures import SIGNATURES

RULES = ("tls_without_cuda", "tls_caret", "ucx_transport_unavailable", "net_device_unavailable", "no_am_transport",
         "endpoint_timeout", "memlock", "uverbs", "unreachable", "remote_disconnect", "no_plugins", "nixl_missing",
         "mismatch", "timeout", "nixl_err_backend")


def classify(text: str, subject: str = "transfer") -> Optional[Verdict]:
    """The cause of the first rule whose signature the text shows; None when none does (unrecognised)."""
    for rule in RULES:
        sig = SIGNATURES[rule]
        m = sig.regex.search(text)
        if m:
            start, end = text.rfind("\n", 0, m.start()) + 1, text.find("\n", m.end())
            return verdict(sig.cause, subject, (f"log:{sig.id}", text[start:end if end >= 0 else None][:300]),
                           restart=restart(("<node>", "server")))   # a failed transfer names no fleet node
    return None
