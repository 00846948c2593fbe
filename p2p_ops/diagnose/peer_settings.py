"""What each running peer actually uses for the settings that must match (`p2p_ops.spec.agreement`), and where they
disagree.

The #1 field failure is silent: peers that hash differently share nothing and report no error. The spec
check refuses such a fleet before launch; this module looks at a *running* fleet (a hand-edited env.sh, a
server started by hand) from two sources: the server's own /status, and the environment of its process.
`test basic` names the first disagreement as the likely cause of a failed proof; `doctor` reads more sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from p2p_ops.endpoints import lmcache_api
from p2p_ops.facts.envfile import process_env_fact
from p2p_ops.facts.sections import read_node
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.agreement import (
    ENGINE_MODEL_ENV,
    SERVER_ENV,
    Disagreement,
    disagreements,
    engine_model,
    values_from_env,
)


@dataclass
class PeerSettings:
    instance: str
    values: dict[str, Optional[str]] = field(default_factory=dict)   # must-agree key -> value (None: unread)


def collect(ctx: FleetContext) -> list[PeerSettings]:
    """For every instance: /status chunk size and hash, plus its server's (and embedded engine's) environment."""
    out = []
    for node, inst in ctx.fleet.instances():
        facts = {"server": process_env_fact(ctx.proc("server", inst).pidfile, SERVER_ENV)}
        if ctx.fleet.runtime == "embedded":
            facts["engine"] = process_env_fact(ctx.proc("engine", inst).pidfile, ENGINE_MODEL_ENV)
        read = read_node(ctx.conn(node), facts, timeout=15)
        values = values_from_env(facts["server"].parse(read["server"].output))
        if "engine" in facts:
            values["engine_model"] = engine_model(facts["engine"].parse(read["engine"].output))
        st = lmcache_api.server_status(ctx.server_url(node, inst))
        # What the server reports beats what its environment asked for.
        if st.chunk_size is not None:
            values["chunk_size"] = str(st.chunk_size)
        if st.hash_algorithm:
            values["hash_algorithm"] = st.hash_algorithm
        out.append(PeerSettings(inst.id, values))
    return out


def mismatches(peers: list[PeerSettings]) -> list[Disagreement]:
    """Must-agree keys whose known values differ between peers (unknown values are not evidence either way)."""
    return disagreements({p.instance: p.values for p in peers})
