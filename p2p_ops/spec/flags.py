"""The extra flags the spec passes on (settings.server_extra_args, vllm.args, router.args), read the way each
program's own parser reads them, so that no spelling of a flag the spec owns gets past `validate`.

The spec owns every flag that binds an address or a port, sets a must-agree value or the connector: a second
value on the command line would hide from validate and the doctor (which read the spec), or bind beyond
loopback. One table per program says which flags those are and which spec field owns each.

How each program reads a word:
- lmcache server (Python argparse, allow_abbrev on): `--flag=value`, and any unambiguous prefix of a flag reads
  as the flag (`--hos` is --host). An ambiguous prefix is an error there, so a word that is a prefix of an owned
  flag is refused whatever else it could mean (no lmcache 0.5.6 flag is a prefix of an owned one:
  tests/unit/test_owned_flags_fuzz.py checks that against the installed parser).
- vLLM (FlexibleArgumentParser, argparse with allow_abbrev on): the same, and `_` reads as `-` in a flag's name
  (`--kv_transfer_config`), and `--flag.key value` sets one key of --flag's JSON.
- vllm-router (Rust, clap): exact names only, `--flag=value` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional

from p2p_ops.causes import Verdict, verdict

_BIND = "nodes[].bind (else nodes[].address)"


@dataclass(frozen=True)
class Program:
    name: str
    owned: dict[str, str]            # flag -> what owns it: the spec field, or why no extra flag may set it
    prefixes: bool = False           # argparse: an unambiguous prefix reads as the whole flag
    underscores: bool = False        # vLLM: `_` in a flag's name reads as `-`, `--flag.key v` sets --flag's key

    def flag_of(self, word: str, flags: Optional[Collection[str]] = None) -> Optional[str]:
        flags = self.owned if flags is None else flags
        if not word.startswith("--") or word == "--":
            return None
        name = word.split("=", 1)[0]
        if self.underscores:
            name = name.split(".", 1)[0].replace("_", "-")
        if name in flags:
            return name
        if self.prefixes and len(name) > 2:
            return next((flag for flag in flags if flag.startswith(name)), None)
        return None

    def check(self, args: list[str]) -> list[str]:
        """`args` as they are, or a field validator's ValueError naming the first word that sets an owned flag,
        and what owns that flag."""
        if "" in args:
            raise ValueError("empty string in the list; remove it")
        for word in args:
            if (flag := self.flag_of(word)) is not None:
                how = "is" if word.split("=", 1)[0] == flag else "reads as"
                raise ValueError(f"{word[:60]!r} {how} {self.name} {flag}, which {self.owned[flag]}; remove it")
        return args


LMCACHE_SERVER = Program("lmcache server", prefixes=True, owned={
    "--instance-id": "p2pctl sets from instances[].id",
    "--host": f"p2pctl sets from {_BIND}",
    "--port": "p2pctl sets from instances[].ports.mp",
    "--http-host": f"p2pctl sets from {_BIND}",
    "--http-port": "p2pctl sets from instances[].ports.http",
    "--chunk-size": "p2pctl sets from settings.chunk_size (every peer must agree)",
    "--hash-algorithm": "p2pctl sets from settings.hash_algorithm (every peer must agree)",
    "--max-workers": "p2pctl sets from settings.max_workers",
    "--supported-transfer-mode": "p2pctl sets from settings.supported_transfer_mode",
    "--shm-name": "p2pctl sets from settings.shm_transport",
    "--l1-size-gb": "p2pctl sets from settings.l1_size_gb",
    "--l1-init-size-gb": "p2pctl sets from settings.l1_size_gb",
    "--l1-align-bytes": "p2pctl sets from settings.l1_align_bytes (every peer must agree)",
    "--eviction-policy": "p2pctl sets from settings.eviction_policy",
    "--coordinator-url": "p2pctl sets from coordinator.host and coordinator.port",
    "--coordinator-advertise-ip": "p2pctl sets from nodes[].address",
    "--coordinator-heartbeat-interval": "p2pctl sets from settings.heartbeat_interval",
    "--p2p-advertise-url": "p2pctl sets from nodes[].address and instances[].ports.p2p",
    "--p2p-listen-url": f"p2pctl sets from {_BIND} and instances[].ports.p2p",
    "--p2p-transfer-engine": "p2pctl sets from settings.transfer_engine (every peer must agree)",
    "--p2p-lookup-timeout": "p2pctl sets from settings.p2p_lookup_timeout",
    "--p2p-load-timeout": "p2pctl sets from settings.p2p_load_timeout",
    "--prometheus-port": "would open a metrics port on every interface (the server's metrics are on "
                         "instances[].ports.http already)",
})

VLLM = Program("vLLM", prefixes=True, underscores=True, owned={
    "--model": "p2pctl sets from vllm.model_path (else model)",
    "--served-model-name": "p2pctl sets from model (every engine must agree)",
    "--host": f"p2pctl sets from {_BIND}",
    "--port": "p2pctl sets from instances[].ports.engine",
    "--uds": "would move the engine off instances[].ports.engine",
    "--kv-transfer-config": "p2pctl sets to the instance's own lmcache server (the connector)",
    "--kv-events-config": "p2pctl sets from router.kv_events (every engine must agree)",
    "--block-size": "p2pctl sets from vllm.block_size (every engine must agree)",
    "--config": "reads more flags from a file validate cannot check; write them into vllm.args",
})

ROUTER = Program("vllm-router", owned={
    "--host": "p2pctl sets from router.node's bind address",
    "--port": "p2pctl sets from router.port",
    "--prometheus-host": "p2pctl sets from router.node's bind address",
    "--prometheus-port": "p2pctl sets from router.prometheus_port",
    "--vllm-discovery-address": "would open a discovery port no spec field owns",
    "--worker-urls": "p2pctl sets from the fleet's instances",
    "--policy": "p2pctl sets from router.policy",
    "--kv-event-source": "p2pctl sets from router.kv_events",
    "--kv-event-replay-source": "p2pctl sets from router.kv_events",
    "--kv-event-block-size": "p2pctl sets from the engines' block size",
    "--kv-event-model": "p2pctl sets from model",
})

# LMCache refuses P2P at start when L1 is not one contiguous registered region (reference/lmcache-p2p.md: "refuses
# it when L1 is GDS (--gds-l1-path) or Device-DAX (--l1-devdax-path)"): validate says so before a server dies.
P2P_REFUSED_L1 = {"--gds-l1-path": "a GDS L1", "--l1-devdax-path": "a Device-DAX L1"}


def p2p_refused_l1(args: list[str], subject: str, field: str) -> Optional[Verdict]:
    """The catalogue's verdict when `args` (the server extra args at `field`) give an L1 LMCache refuses with P2P."""
    for word in args:
        if flag := LMCACHE_SERVER.flag_of(word, P2P_REFUSED_L1):
            return verdict("p2p_refused_l1", subject, (field, f"{word[:60]!r} reads as lmcache server {flag}: "
                           f"{P2P_REFUSED_L1[flag]}, which LMCache refuses with P2P (it registers one contiguous L1 "
                           "for transfers)"), flag=flag)
    return None
