"""What `lmcache server` (LMCache 0.5.6) refuses or dies of at start that a spec can ask for across fields, refused
by `validate` first (one field's own values are refused with the field: no `tcp` transfer engine in 0.5.6).

The L1 size: LMCache takes int(l1_size_gb * 2**30) bytes (lmcache/v1/distributed/config.py:1104) and, for P2P on
NIXL, registers them as --l1-align-bytes pages from the start (transfer_channel/impl/nixl_impl.py:342-351). A last
partial page ends past the registered region: prep_xfer_dlist fails with NIXL_ERR_NOT_FOUND and the server exits.
Refused with P2P off too (`bench placement` turns it on and off on one fleet). --l1-init-size-gb is capped at the
size (config.py:315), so it is whole pages whenever the size is.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Optional

from p2p_ops.causes import Verdict, restart, verdict
from p2p_ops.errors import BadInput
from p2p_ops.spec.flags import LMCACHE_SERVER

if TYPE_CHECKING:
    from p2p_ops.spec.model import Fleet
    from p2p_ops.spec.settings import Settings

GIB = 1 << 30  # LMCache's "GB"

# Extra server flags LMCache refuses at start beside a spec setting that is on: (setting, {flag: what it makes}, why).
# lmcache/v1/multiprocess/http_server.py:216-237, v1/distributed/config.py:330-339.
CLASHES: tuple[tuple[str, dict[str, str], str], ...] = (
    ("p2p", {"--gds-l1-path": "a GDS L1", "--l1-devdax-path": "a Device-DAX L1"},
     "with P2P (it registers one contiguous L1 for transfers)"),
    ("shm_transport", {"--l1-use-hugepages": "a hugepage L1", "--l1-devdax-path": "a Device-DAX L1"},
     "beside a shared-memory L1 (--shm-name)"),
    ("cache_events", {"--disable-observability": "no observability event bus"},
     "with cache events on (they ride that bus)"),
)


def nearest_l1(gb: float, align: int) -> list[str]:
    """[] when an L1 of `gb` GiB is whole `align`-byte pages as LMCache counts them; else the nearest sizes (GiB,
    every digit: whole pages are an exact decimal) that are, below and above."""
    size = int(gb * GIB)
    below = size - size % align
    return [] if size and size == below else [format(Decimal(n) / GIB, "f") for n in (below, below + align) if n]


def l1_misaligned(gb: float, align: int) -> Optional[str]:
    """Why a server cannot start with an L1 of `gb` GiB, naming the nearest sizes it can; None when it can."""
    near = nearest_l1(gb, align)
    return (f"{gb} GiB is {int(gb * GIB)} bytes, not a multiple of l1_align_bytes ({align} bytes): NIXL registers L1 "
            "in pages of that size and a partial last one stops the server at start (NIXL_ERR_NOT_FOUND in "
            f"prep_xfer_dlist); nearest valid {' or '.join(near)}") if near else None


def clash(args: list[str], s: Settings, subject: str = "fleet", field: str = "settings.server_extra_args",
          restart_cmd: str = "p2pctl down && p2pctl up") -> Optional[Verdict]:
    """The catalogue's verdict on the first extra server flag LMCache refuses beside a setting that is on."""
    for setting, flags, why in CLASHES:
        for word in args if getattr(s, setting) else ():
            if flag := LMCACHE_SERVER.flag_of(word, flags):
                seen = f"{word[:60]!r} reads as lmcache server {flag}: {flags[flag]}, which LMCache refuses {why}"
                cause = "p2p_refused_l1" if setting == "p2p" else "server_args_clash"
                return verdict(cause, subject, (field, seen), flag=flag, setting=setting, restart=restart_cmd)
    return None


def check(fleet: Fleet) -> None:
    """BadInput naming the first field whose value an instance's server would refuse or die of at start, with the
    catalogue's verdict (l1_misaligned, p2p_refused_l1, server_args_clash) as its cause."""
    for where, node, inst in fleet.placed_instances():
        s = fleet.effective_settings(inst)
        at = {k: f"{where}.settings.{k}" if getattr(inst.settings, k) is not None else f"settings.{k}"
              for k in ("l1_size_gb", "server_extra_args")}
        if why := l1_misaligned(s.l1_size_gb, s.l1_align_bytes):
            raise BadInput(f"{at['l1_size_gb']}: {why}", cause=verdict(
                "l1_misaligned", inst.id, (at["l1_size_gb"], why),
                nearest=" or ".join(nearest_l1(s.l1_size_gb, s.l1_align_bytes)),
                restart=restart((node.name, "server"))))
        field = at["server_extra_args"]
        if v := clash(s.server_extra_args, s, inst.id if field.startswith("nodes") else "fleet", field,
                      restart((node.name, "server"))):
            raise BadInput(f"{at['server_extra_args']}: {v.line()}", cause=v)
