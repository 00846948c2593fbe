"""The diagnosis benchmark (issue 28 item 6): planted causes on a real local fleet, every verb that judges.

Each case plants one cause on a running local fleet (a prompt that differs, a stopped server, a hand-edited
env.sh and one server restarted, an engine started without its server link, an L1 filled until it evicts) or,
for a spec-level cause, on a fleet file (`validate`). Every verb that judges that kind of cause then runs through
the CLI (`python -m p2p_ops.cli ... --json`, a subprocess with a timeout): explain, doctor, diagnose on the
matching symptom, `test basic`, `test matrix`, `triage` (a bundle taken during the case, judged offline), and
the verbs that refuse (`wait` for a running fleet, `validate`
for a spec). Each verb's top cause is the catalogue id its --json names (`top_*` below: explain's first cause of
the node, the doctor's ranked `causes`, diagnose's and triage's `likely_cause`, a test's `cause` or a refusal's `cause`; never
its prose), compared with the ids the case planted (a case may accept a less specific id, such as `env_drift` for
a hand-edited env.sh). Not every verb applies to every case ("n/a"): a prompt is explain's; a GDS L1 path is
validate's.

Scores, per verb: correct / wrong / abstained (no cause, or one the evidence does not confirm, or a healthy fleet
where a case documents that the verb cannot see the cause) / error. Contradictions: cases where two verbs name
different causes (abstentions excluded; ids the case accepts count as one). Confident wrong: a named cause that
is not a planted one.

    python -m bench.diagnosis [--quick | --one-verb] [--json PATH] [--only id,id] [--out DIR]

Exit 1 when any verb names a wrong cause or errs, two verbs contradict each other, a plant fails, or a verb
abstains where its case does not allow it (the same rule as tests/e2e/test_diagnosis_quick.py); 0 otherwise.
`--one-verb` (CI's form, `make test-diagnosis-ci`) runs every case but judges each by one verb: the verb, among
those the case expects an answer from, that the cases before it used least (the order of VERBS breaks ties), so
every verb is exercised and nothing is left to chance; it leaves out only the verbs that would repeat.

One fleet for the run (3 nodes; --quick: 2), reused across cases: each case restarts only the server or engine
its cause needs and puts it back (re-rendered from fleet.yaml) before the next. The fleet is always taken down.
Results go to bench/results/diagnosis-<stamp>/ (table.txt, results.json) unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

REPO = Path(__file__).resolve().parent.parent
# LMCache never phones home from the fleets this starts, also when run without make (which exports it).
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

from p2p_ops.endpoints import engine_api, lmcache_api  # noqa: E402
from p2p_ops.harness import prompts  # noqa: E402
from p2p_ops.harness.openai_client import complete  # noqa: E402
from p2p_ops.lifecycle import launch  # noqa: E402
from p2p_ops.lifecycle.context import FleetContext  # noqa: E402
from p2p_ops.spec.layout import COORDINATOR  # noqa: E402

VERBS = ("explain", "doctor", "diagnose", "basic", "matrix", "wait", "validate", "triage")
CHUNK = 256
PROMPT_CHARS = 8 * CHUNK + 100      # the byte-level engine: ~1 token per character, 8 full chunks + a partial one
ABSTAIN = "no cause confirmed"
HEALTHY = "healthy"                 # the verb found nothing wrong (an abstention where a case allows it)
VERB_TIMEOUT_S = 240


def log(msg: str) -> None:
    print(f"[diagnosis {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- a verb's answer as a cause id: read from its --json, never from its prose ----------------------------

def cause_id(v: Optional[dict]) -> str:
    """A verdict's catalogue id (p2p_ops.causes); none, or one the evidence does not confirm, is an abstention."""
    return v["id"] if isinstance(v, dict) and v.get("id") and v.get("confirmed") else ABSTAIN


def seen(v: Optional[dict]) -> str:
    return "; ".join(e["seen"] for e in (v or {}).get("evidence") or [])[:300]


def top_explain(doc: dict, instance: str) -> tuple[str, str]:
    """explain --json: the node's causes, its first missing chunk's first."""
    node = next((n for n in doc.get("nodes", []) if n["instance"] == instance), None)
    if node is None:
        return "error", f"no verdict for {instance}"
    if not node.get("causes"):
        return HEALTHY, f"[{node.get('strip')}] {node.get('verdict')}"
    v = node["causes"][0]
    return cause_id(v), f"[{node['strip']}] {v['id']} {v['subject']}: {seen(v)}"


def top_doctor(doc: dict) -> tuple[str, str]:
    """doctor --json: `causes`, ranked by the one judge (the benchmark ranks nothing itself)."""
    causes = doc.get("causes") or []
    if not causes:
        return HEALTHY, "result: healthy"
    return cause_id(causes[0]), f"{causes[0]['id']} {causes[0]['subject']}: {seen(causes[0])}"


def top_triage(doc: dict) -> tuple[str, str]:
    """triage --json of a bundle taken during the case: the doctor's judge on the facts it captured, offline."""
    lc = doc.get("likely_cause")
    agree = {True: "same as the live doctor", False: "NOT the live doctor's", None: "no live doctor recorded"}[
        doc.get("agrees_with_live_doctor")]
    return (cause_id(lc), f"{lc['id']} {lc['subject']}: {seen(lc)} ({agree})") if lc else (HEALTHY, f"no cause ({agree})")


def top_diagnose(doc: dict) -> tuple[str, str]:
    lc = doc.get("likely_cause")
    if not lc:
        return ABSTAIN, "no cause confirmed; seen: " + "; ".join((doc.get("no_cause_confirmed") or {}).get(
            "evidence_seen", [])[:3])
    return cause_id(lc.get("cause")), f"{lc['step']} / {lc['evidence']}: {lc.get('detail', '')}"


def top_refusal(code: int, doc: dict) -> tuple[str, str]:
    """A refusal (wait, validate, a test on a fleet that is not ready): --json's {"ok": false, "error", "cause"}."""
    if code == 0:
        return HEALTHY, "ready / valid"
    return cause_id(doc.get("cause")), str(doc.get("error", ""))[:1500]


def top_basic(doc: dict) -> tuple[str, str]:
    if doc.get("ok") is False:
        return top_refusal(2, doc)
    if doc.get("passed"):
        return HEALTHY, "PASS"
    return cause_id(doc.get("cause")), doc.get("likely_cause") or ""


def top_matrix(doc: dict, about: str) -> tuple[str, str]:
    if doc.get("ok") is False:
        return top_refusal(2, doc)
    failing = [p for p in doc.get("pairs") or [] if not p.get("ok") and not p.get("skipped")]
    if not failing:
        return HEALTHY, "every pair passed"
    p = next((p for p in failing if about in (p["source"], p["target"])), failing[0])
    return cause_id(p.get("cause")), f"{p['source']}->{p['target']}: {p.get('likely_cause') or p.get('error')}"


TOP = {"explain": lambda doc, case: top_explain(doc, f"{case.explain_node}-0"),
       "doctor": lambda doc, case: top_doctor(doc), "diagnose": lambda doc, case: top_diagnose(doc),
       "basic": lambda doc, case: top_basic(doc), "matrix": lambda doc, case: top_matrix(doc, case.about),
       "triage": lambda doc, case: top_triage(doc)}


# ---- the cases ----------------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    title: str
    expect: tuple[str, ...]                       # the planted cause's catalogue id(s), the most specific first
    verbs: dict[str, str]                         # verb -> "" (must name it) or "abstain ok: why"
    plant: Callable                               # (bench) -> None, before the verbs
    restore: Optional[Callable] = None            # (bench) -> None, after them
    explain_node: str = "node-b"                  # where the request that misses would go
    basic: tuple[str, str] = ("node-a-0", "node-b-0")
    symptom: str = "zero cached tokens"
    about: str = "node-b-0"                       # the instance the cause is about (matrix pairs)
    needs_fleet: bool = True
    replants: str = ""                            # the node whose server its plant restarts from a fresh env.sh


@dataclass
class Cell:
    verb: str
    cause: str = "n/a"
    raw: str = ""
    score: str = "n/a"                            # correct | wrong | abstained | error | n/a
    seconds: float = 0.0
    exit_code: Optional[int] = None


@dataclass
class CaseResult:
    id: str
    title: str
    expect: tuple[str, ...]
    cells: dict[str, Cell] = field(default_factory=dict)
    plant_error: str = ""
    seconds: float = 0.0
    contradiction: bool = False


class Bench:
    def __init__(self, ctx: Optional[FleetContext], tmp: Path):
        self.ctx, self.tmp = ctx, tmp
        self.prompt_file = ""
        self.text = ""
        self.seed = 1000                          # each run starts its own fleet: fixed prompts repeat
        self.validate_file = ""
        # Nodes whose server still runs from a planted env.sh: healed before the next case, unless that case
        # plants on the same server anyway (Case.replants), which then starts from a fresh rendering: one restart
        # of node-c per env.sh case instead of two.
        self.planted: set[str] = set()

    # -- the CLI
    def cli(self, *argv: str, timeout: float = VERB_TIMEOUT_S) -> tuple[int, str, str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        try:
            p = subprocess.run([sys.executable, "-m", "p2p_ops.cli", *argv], capture_output=True, text=True,
                               timeout=timeout, env=env, cwd=str(self.tmp))
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {timeout:g} s"
        return p.returncode, p.stdout, p.stderr

    @property
    def f(self) -> str:
        return str(self.ctx.fleet_file)

    # -- fleet helpers
    def urls(self, inst: str) -> tuple[str, str]:
        node, i = self.ctx.fleet.instance(inst)
        return self.ctx.engine_url(node, i), self.ctx.server_url(node, i)

    def held(self, text: str, inst: str = "node-a-0") -> int:
        tokens, _ = engine_api.tokenize(self.urls(inst)[0], self.ctx.fleet.model, text)
        if not tokens:
            return 0
        return lmcache_api.directory_held_chunks(self.ctx.fleet.coordinator_url, self.ctx.fleet.model, tokens) or 0

    def compute(self, on: str = "node-a-0", chars: int = PROMPT_CHARS, wait_chunks: int = 8) -> str:
        """A fresh prompt computed on `on`, saved to a file; waits (bounded) for the key directory to list it."""
        self.seed += 1
        text = prompts.document(self.seed, 0, chars)
        r = complete(self.urls(on)[0], self.ctx.fleet.model, text, 4)
        if not r.ok:
            raise RuntimeError(f"computing the prompt on {on} failed: {r.error}")
        deadline = time.monotonic() + 30
        while wait_chunks and self.held(text, on) < wait_chunks and time.monotonic() < deadline:
            time.sleep(0.5)
        self.text = text
        path = self.tmp / f"prompt-{self.seed}.txt"
        path.write_text(text)
        self.prompt_file = str(path)
        return text

    def write_prompt(self, text: str, name: str) -> None:
        path = self.tmp / f"{name}-{self.seed}.txt"
        path.write_text(text)
        self.prompt_file = str(path)

    def edit_env(self, inst: str, key: str, value: str) -> None:
        env = self.ctx.layout.env(inst)
        lines = env.read_text().splitlines()
        if any(line.startswith(f"export {key}=") for line in lines):
            lines = [f"export {key}={value}" if line.startswith(f"export {key}=") else line for line in lines]
        else:
            lines.append(f"export {key}={value}")
        env.write_text("\n".join(lines) + "\n")

    def restart(self, node: str, role: str = "server", rerender: bool = False, mesh: bool = True) -> str:
        """Restart one node's server (or engine) from its env.sh; '' when it started, else why not."""
        launch.down(self.ctx, only=node, roles=(role,))
        try:
            launch.up(self.ctx, only=node, rerender=rerender, roles=(role,), start_timeout=90)
        except Exception as exc:  # noqa: BLE001 - a planted cause may stop the unit from starting
            return f"{type(exc).__name__}: {str(exc)[:300]}"
        inst = next(n for n in self.ctx.fleet.nodes if n.name == node).instances[0].id
        if role == "server":
            self.wait_mesh([inst], 90 if mesh else 20)
        else:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and engine_api.engine_lmcache_state(self.urls(inst)[0]) != "connected":
                time.sleep(1)
        return ""

    def wait_mesh(self, insts: list[str], timeout_s: float) -> bool:
        """Wait (bounded) until each of `insts`' servers is registered and sees every other one."""
        peers = len(self.ctx.fleet.instances()) - 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if all((st := lmcache_api.server_status(self.urls(i)[1])).p2p_state == "registered"
                       and st.peer_count == peers for i in insts):
                    return True
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(1)
        return False

    def restart_coordinator(self, rerender: bool) -> None:
        """Restart the coordinator (from its env.sh as it stands, or re-rendered from fleet.yaml), then wait for
        every server to register with it again."""
        launch.down(self.ctx, roles=(COORDINATOR,))
        launch.up(self.ctx, rerender=rerender, roles=(COORDINATOR,), start_timeout=60)
        if not self.wait_mesh([i.id for _, i in self.ctx.fleet.instances()], 90):
            log("not every server registered again with the restarted coordinator within 90 s")

    def heal(self, node: str, role: str = "server") -> None:
        """Put one node's unit back as fleet.yaml renders it (the doctor's one-server fix)."""
        err = self.restart(node, role, rerender=True)
        if err:
            log(f"could not restore {node}'s {role}: {err}")
        if role == "server":     # the engine relinks by itself; wait for it (bounded)
            inst = next(n for n in self.ctx.fleet.nodes if n.name == node).instances[0].id
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and engine_api.engine_lmcache_state(self.urls(inst)[0]) != "connected":
                time.sleep(1)


# -- plants

OPENING = "A different opening sentence. "


def plant_first_sentence(b: Bench) -> None:
    text = b.compute()
    b.write_prompt(OPENING + text[len(OPENING):], "first")


def plant_first_sentence_saved(b: Bench) -> None:
    """The original sent as a user of this toolkit sends one (`p2pctl test basic --prompt-file`: node-a computes it,
    node-b pulls it), so its run keeps the prompt explain compares against."""
    b.seed += 1
    original = b.tmp / f"original-{b.seed}.txt"
    original.write_text(prompts.document(b.seed, 0, PROMPT_CHARS))
    code, out, err = b.cli("test", "basic", "-f", b.f, "--a", "node-a-0", "--b", "node-b-0", "--prompt-file",
                           str(original), "--max-tokens", "4", "--json")
    if code != 0:
        raise RuntimeError(f"test basic with the original prompt exited {code}: {(err or out)[-300:]}")
    text = original.read_text()
    b.write_prompt(OPENING + text[len(OPENING):], "first")


def plant_middle_chunk(b: Bench) -> None:
    text = b.compute()
    mid = 4 * CHUNK + CHUNK // 2
    b.write_prompt(text[:mid] + ("Q" if text[mid] != "Q" else "Z") + text[mid + 1:], "middle")


def plant_short_prompt(b: Bench) -> None:
    b.write_prompt(prompts.document(b.seed + 7, 0, CHUNK // 2), "short")


def plant_holder_stopped(b: Bench) -> None:
    b.compute()
    launch.down(b.ctx, only="node-a", roles=("server",))


def restore_holder_stopped(b: Bench) -> None:
    b.heal("node-a")


def signal_unit(b: Bench, role: str, node: Optional[str], sig: signal.Signals) -> None:
    """Signal a unit's whole process group (it leads its own session: the pid its pidfile holds); `node` names
    the instance's node for a server or an engine, None for the coordinator or the router."""
    inst = next(n for n in b.ctx.fleet.nodes if n.name == node).instances[0] if node else None
    os.killpg(int(Path(b.ctx.proc(role, inst).pidfile).read_text().strip()), sig)


def plant_holder_frozen(b: Bench) -> None:
    """LMCache #4676's state, made with SIGSTOP: node-a's server alive, its ports open, answering nothing."""
    b.compute()
    signal_unit(b, "server", "node-a", signal.SIGSTOP)


def restore_holder_frozen(b: Bench) -> None:
    signal_unit(b, "server", "node-a", signal.SIGCONT)     # a stopped process cannot honour the SIGINT of `down`
    b.heal("node-a")


def plant_holder_killed(b: Bench) -> None:
    """A holder that crashed (SIGKILL: no deregistration, the coordinator lists it until --instance-timeout), the
    peer of LMCache PR #3740's review that dies mid-lookup."""
    b.compute()
    signal_unit(b, "server", "node-a", signal.SIGKILL)


def plant_lookup_leak(b: Bench) -> None:
    """The requester that crashed mid-lookup (the review of LMCache PR #3740): node-a frozen while node-b's server
    looks a prefix up on it, node-b's server killed, node-a thawed. node-a then takes the queued lookup, read-locks
    the chunks and keeps the job (lmcache 0.5.6 has no time limit on it) for a requester that will never query it:
    reproduced here, 1 job and 8 read-locked objects held for good. node-b's server is started again before the
    verbs run, so the leak on node-a is what is left."""
    text = b.compute()
    signal_unit(b, "server", "node-a", signal.SIGSTOP)
    try:
        done: dict = {}
        asking = threading.Thread(target=lambda: done.update(r=complete(b.urls("node-b-0")[0], b.ctx.fleet.model,
                                                                          text, 2, timeout=60)))
        asking.start()
        time.sleep(1.5)                              # node-b's lookup is on its way to frozen node-a
        signal_unit(b, "server", "node-b", signal.SIGKILL)
        asking.join(90)
    finally:
        signal_unit(b, "server", "node-a", signal.SIGCONT)
    b.heal("node-b")
    if not b.wait_mesh(["node-a-0", "node-b-0"], 90):
        log("node-a and node-b did not both register again within 90 s")


def restore_lookup_leak(b: Bench) -> None:
    b.heal("node-a")            # the fix: a restart drops the held jobs (and node-a's L1)


def plant_engine_killed(b: Bench) -> None:
    """node-b's engine killed (SIGKILL), its server left running: LMCache #4676 begins so (a server whose engine
    died)."""
    b.compute()
    signal_unit(b, "engine", "node-b", signal.SIGKILL)


def plant_engine_frozen(b: Bench) -> None:
    """node-b's engine frozen (SIGSTOP): alive, its port open, /health answering nothing."""
    b.compute()
    signal_unit(b, "engine", "node-b", signal.SIGSTOP)


def restore_engine_frozen(b: Bench) -> None:
    signal_unit(b, "engine", "node-b", signal.SIGCONT)
    b.heal("node-b", "engine")


def plant_keepalive_short(b: Bench) -> None:
    """LMCache PR #3876's failure: the coordinator's keep-alive at the servers' heartbeat interval (its env.sh
    edited, the coordinator restarted), so it closes idle connections just as a heartbeat reuses them."""
    beat = re.search(r"^export LMCACHE_COORDINATOR_HEARTBEAT_INTERVAL=([\d.]+)",
                     b.ctx.layout.env("node-a-0").read_text(), flags=re.M)
    b.edit_env(COORDINATOR, "LMCACHE_MP_COORDINATOR_TIMEOUT_KEEP_ALIVE", str(int(float(beat.group(1)))))
    b.restart_coordinator(rerender=False)
    b.compute()


def plant_coordinator_frozen(b: Bench) -> None:
    """The coordinator frozen (SIGSTOP): its port open, answering nothing; servers keep their peers a few polls."""
    b.compute(wait_chunks=0)
    signal_unit(b, COORDINATOR, None, signal.SIGSTOP)


def restore_coordinator_frozen(b: Bench) -> None:
    signal_unit(b, COORDINATOR, None, signal.SIGCONT)
    b.restart_coordinator(rerender=True)


def _restart_planted(b: Bench, node: str, edits: dict[str, str], role: str = "server", mesh: bool = True) -> None:
    inst = f"{node}-0"
    if node in b.planted:          # the last case's edit is still there: start this one's from a fresh env.sh
        launch.render(b.ctx, only=node)
        b.planted.discard(node)
    for key, value in edits.items():
        b.edit_env(inst, key, value)
    err = b.restart(node, role, mesh=mesh)
    if err:
        log(f"{node}'s {role} with {edits}: {err}")


def plant_chunk_size(b: Bench) -> None:
    _restart_planted(b, "node-c", {"LMCACHE_CHUNK_SIZE": "512"})
    b.compute("node-a-0")


def plant_hash_algorithm(b: Bench) -> None:
    _restart_planted(b, "node-c", {"LMCACHE_HASH_ALGORITHM": "builtin"})
    b.compute("node-a-0")


def plant_hash_seed(b: Bench) -> None:
    """PYTHONHASHSEED matters only under the builtin hash: node-b and node-c both on builtin, node-c's seed 4242."""
    _restart_planted(b, "node-b", {"LMCACHE_HASH_ALGORITHM": "builtin"})
    _restart_planted(b, "node-c", {"LMCACHE_HASH_ALGORITHM": "builtin", "PYTHONHASHSEED": "4242"})
    b.compute("node-b-0", wait_chunks=0)
    time.sleep(3)


def restore_hash_seed(b: Bench) -> None:
    b.heal("node-b")
    b.planted.add("node-c")


def heal_node_c_later(b: Bench) -> None:
    b.planted.add("node-c")


def plant_advertise_url(b: Bench) -> None:
    _restart_planted(b, "node-c", {"LMCACHE_P2P_ADVERTISE_URL": "127.0.0.1:9"}, mesh=False)
    b.compute("node-c-0", wait_chunks=0)
    time.sleep(3)


def plant_transport(b: Bench) -> None:
    _restart_planted(b, "node-c", {"UCX_TLS": "rc"}, mesh=False)   # rc needs RDMA, which this host lacks
    b.compute("node-a-0")


def plant_l1_too_small(b: Bench) -> None:
    """node-c's L1 2 MiB (hand-edited; the spec's smallest is 1 GB) against an 8-chunk prefix of ~4 MiB. Whole 64 KiB
    pages: 0.002 GiB is not, and killed node-c's server at start (NIXL_ERR_NOT_FOUND) instead of filling its L1."""
    _restart_planted(b, "node-c", {"LMCACHE_L1_SIZE_GB": "0.001953125"})
    b.compute("node-a-0")


def plant_engine_unlinked(b: Bench) -> None:
    server = b.ctx.layout.env("node-c-0").read_text()
    port = re.search(r"^export LMCACHE_PORT=(\d+)", server, flags=re.M).group(1)
    _restart_planted(b, "node-c", {"P2P_ENGINE_LMCACHE_URL": f"tcp://127.0.0.1:{int(port) + 97}"}, role="engine",
                     mesh=False)
    b.compute("node-a-0")


def restore_engine_unlinked(b: Bench) -> None:
    b.heal("node-c", "engine")


def plant_evicted(b: Bench) -> None:
    """node-a evicts from 10 % of its 1 GB L1 (the fleet sets its watermark): fill it until the prompt is gone."""
    text = b.compute()
    a = b.urls("node-a-0")[0]
    for i in range(150):
        if b.held(text) == 0:
            log(f"node-a evicted the prompt after {i} fill prompts")
            return
        r = complete(a, b.ctx.fleet.model, prompts.document(b.seed + 100000, i, 4096), 1)
        if not r.ok:
            raise RuntimeError(f"fill request failed: {r.error}")
    raise RuntimeError("node-a never evicted the prompt's chunks after 150 fill prompts")


def _plant_spec(b: Bench, name: str, **settings) -> None:
    from p2p_ops.spec.starter import local_fleet
    data = local_fleet(2, name=name)
    data["settings"].update(settings)
    path = b.tmp / f"{name}-fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    b.validate_file = str(path)


def plant_gds(b: Bench) -> None:
    _plant_spec(b, "gds", server_extra_args=["--gds-l1-path", "/mnt/nvme"])


def plant_l1_misaligned(b: Bench) -> None:
    """The L1 a user met: 0.1 GiB is not whole 65536-byte pages, and the server died at start (NIXL_ERR_NOT_FOUND)."""
    _plant_spec(b, "l1", l1_size_gb=0.1)


# Seen in bench/results/diagnosis-2026-12-02b (run b): node-a-0 loaded 1,024 tokens from node-c-0 after its
# handshake to the bad URL had failed once, so a test that passes tells the truth.
PULLS_WORK = ("abstain ok: on a loopback fleet the pulls still work once the handshake to the bad URL has failed; "
              "only reach (doctor), wait and the mesh state show it")
NOT_THE_FLEET = "abstain ok: the fleet is healthy; the cause is in the prompt, which this verb does not read"
PROMPT_VERBS = {"explain": "", "doctor": NOT_THE_FLEET, "diagnose": NOT_THE_FLEET, "triage": NOT_THE_FLEET}
# A case planted by editing env.sh and restarting one unit: the doctor's env_drift names exactly that, less
# specifically than a cause of the setting itself (which the judge ranks first where it sees one).
EDITED = "env_drift"
# triage: a bundle taken during the case, judged offline (`p2pctl bundle`, then `p2pctl triage`): the doctor's answer.
FLEET_VERBS = {"explain": "", "doctor": "", "diagnose": "", "basic": "", "matrix": "", "triage": ""}

CASES: list[Case] = [
    Case("gds_l1", "P2P with a GDS L1 path (spec)", ("p2p_refused_l1",), {"validate": ""}, plant_gds, needs_fleet=False),
    Case("l1_misaligned", "an L1 of 0.1 GiB, not whole 64 KiB pages (spec)", ("l1_misaligned",), {"validate": ""},
         plant_l1_misaligned, needs_fleet=False),
    Case("first_sentence", "a different first sentence", ("prompt_differs",),
         {**PROMPT_VERBS, "explain": "abstain ok: on engine-driven (CPU) fleets the key directory keeps no tokens and "
                                     "no run saved the original, so a different first chunk and a prompt never "
                                     "sent look the same"}, plant_first_sentence),
    Case("first_sentence_saved", "a different first sentence; the original sent by `test basic --prompt-file`",
         ("prompt_differs",), PROMPT_VERBS, plant_first_sentence_saved),
    Case("middle_chunk", "a different middle chunk", ("prompt_differs",), PROMPT_VERBS, plant_middle_chunk),
    Case("short_prompt", "a prompt shorter than a chunk", ("shorter_than_chunk",), PROMPT_VERBS, plant_short_prompt),
    Case("holder_stopped", "the holder's (node-a) server stopped", ("server_down",), {**FLEET_VERBS, "wait": ""},
         plant_holder_stopped, restore_holder_stopped, about="node-a-0"),
    Case("holder_frozen", "the holder's (node-a) server frozen (SIGSTOP: alive, answering nothing)",
         ("server_unresponsive", "instance_evicted"), {**FLEET_VERBS, "wait": ""}, plant_holder_frozen,
         restore_holder_frozen, about="node-a-0"),
    # Field failures (issue 41): what operators report upstream, made here on real processes.
    Case("holder_killed", "the holder's (node-a) server killed (SIGKILL: no deregistration)",
         ("server_down", "instance_evicted"), {**FLEET_VERBS, "wait": ""}, plant_holder_killed,
         restore_holder_stopped, about="node-a-0"),
    Case("lookup_leak", "node-b's server killed mid-lookup on frozen node-a; thawed, node-a holds the job for good",
         ("lookup_leak", "stale_read_locks"),
         {"doctor": "", "diagnose": "", "triage": "",
          "explain": "abstain ok: every chunk still pulls; the leak pins L1 until it fills",
          "basic": "abstain ok: pulls still work while L1 has room", "wait": "abstain ok: every server registered"},
         plant_lookup_leak, restore_lookup_leak, symptom="l1_oom", about="node-a-0"),
    Case("engine_killed", "node-b's engine killed (SIGKILL), its server running", ("engine_down",),
         {**FLEET_VERBS, "wait": ""}, plant_engine_killed, lambda b: b.heal("node-b", "engine")),
    Case("engine_frozen", "node-b's engine frozen (SIGSTOP: alive, answering nothing)", ("engine_down",),
         {**FLEET_VERBS, "wait": ""}, plant_engine_frozen, restore_engine_frozen),
    Case("keepalive_short", "the coordinator's keep-alive at the heartbeat interval (its env.sh, restarted)",
         ("keepalive_short", EDITED),
         {"doctor": "", "diagnose": "", "triage": "",
          **dict.fromkeys(("explain", "basic", "matrix", "wait"), "abstain ok: servers register again after each "
                          "disconnect, and pulls between registered peers work")},
         plant_keepalive_short, lambda b: b.restart_coordinator(rerender=True), symptom="peers not registered"),
    Case("coordinator_frozen", "the coordinator frozen (SIGSTOP: its port open, answering nothing)",
         ("coordinator_down",),
         {"doctor": "", "diagnose": "", "triage": "", "wait": "",
          **dict.fromkeys(("explain", "basic", "matrix"), "abstain ok: servers keep their peer adapters for a few "
                          "polls, so pulls may still work")},
         plant_coordinator_frozen, restore_coordinator_frozen, symptom="peers not registered"),
    Case("chunk_size", "node-c's chunk size 512 (env.sh)", ("chunk_size_differs", EDITED), {**FLEET_VERBS, "wait": ""},
         plant_chunk_size, heal_node_c_later, explain_node="node-c", basic=("node-a-0", "node-c-0"),
         about="node-c-0", replants="node-c"),
    Case("hash_algorithm", "node-c's hash algorithm builtin (env.sh)",
         ("hash_algorithm_differs", "builtin_hash", EDITED), FLEET_VERBS,
         plant_hash_algorithm, heal_node_c_later, explain_node="node-c", basic=("node-a-0", "node-c-0"),
         about="node-c-0", replants="node-c"),
    Case("hash_seed", "PYTHONHASHSEED 4242 on node-c, node-b and node-c on builtin",
         ("hash_seed_differs", EDITED), FLEET_VERBS,
         plant_hash_seed, restore_hash_seed, explain_node="node-c", basic=("node-b-0", "node-c-0"),
         about="node-c-0", replants="node-c"),
    Case("advertise_url", "node-c advertises 127.0.0.1:9 (nobody listens)",
         ("peer_unreachable", "advertise_stale", "not_advertised", EDITED),
         {**FLEET_VERBS, "wait": "", **dict.fromkeys(("basic", "matrix"), PULLS_WORK)}, plant_advertise_url,
         heal_node_c_later, explain_node="node-a", basic=("node-c-0", "node-a-0"), about="node-c-0", replants="node-c"),
    Case("transport", "node-c's UCX_TLS=rc (no RDMA here)", ("tls_unavailable", EDITED), {**FLEET_VERBS, "wait": ""},
         plant_transport, heal_node_c_later, explain_node="node-c", basic=("node-a-0", "node-c-0"),
         symptom="server exits with NIXL_ERR_BACKEND", about="node-c-0", replants="node-c"),
    Case("l1_too_small", "node-c's L1 2 MiB, the prefix ~4 MiB", (EDITED, "l1_oom", "l1_full"),
         {**FLEET_VERBS, "basic": "abstain ok: its 4-chunk proof (~2 MiB) may fit the 2 MiB L1 and pass, truly "
                                  "(seen 2026-12-07); the 8-chunk prefix does not"},
         plant_l1_too_small, heal_node_c_later, explain_node="node-c", basic=("node-a-0", "node-c-0"),
         symptom="l1_oom", about="node-c-0", replants="node-c"),
    Case("engine_unlinked", "node-c's engine started without its server link", (EDITED, "engine_degraded"),
         {**FLEET_VERBS, "wait": ""}, plant_engine_unlinked, restore_engine_unlinked, explain_node="node-c",
         basic=("node-a-0", "node-c-0"), about="node-c-0"),
    Case("evicted", "node-a's L1 filled until it evicts the prefix", ("evicted",),
         {"explain": "abstain ok: a prompt file ties the prompt to no server (eviction vs another first chunk)",
          "doctor": "abstain ok: an L1 that evicts under load is the cache at work, not a fault of the fleet",
          "triage": "abstain ok: the bundle's doctor facts, as the doctor's",
          "diagnose": ""}, plant_evicted, explain_node="node-b"),
]
# --quick: no restart beyond one server, 2 nodes.
QUICK = ("gds_l1", "first_sentence", "first_sentence_saved", "middle_chunk", "short_prompt", "holder_stopped")


# ---- running and scoring ---------------------------------------------------------------------------

def verb_argv(b: Bench, case: Case, verb: str) -> list[str]:
    """The CLI line of one verb on one case; every one prints one JSON document. `validate` reads a spec file and
    runs without a fleet (b.ctx is None then), so each line is built only for its own verb."""
    lines: dict[str, Callable[[], list[str]]] = {
        "explain": lambda: ["explain", "-f", b.f, "--prompt-file", b.prompt_file, "--node", case.explain_node],
        "doctor": lambda: ["doctor", "-f", b.f],
        "diagnose": lambda: ["diagnose", case.symptom, "-f", b.f],
        "basic": lambda: ["test", "basic", "-f", b.f, "--a", case.basic[0], "--b", case.basic[1], "--chunks", "4",
                          "--max-tokens", "4"],
        "matrix": lambda: ["test", "matrix", "-f", b.f, "--chunks", "2", "--max-tokens", "2"],
        "wait": lambda: ["wait", "-f", b.f, "--timeout", "20"],
        "validate": lambda: ["validate", "-f", b.validate_file],
        "triage": lambda: ["triage", str(b.tmp / "bundle.tar.gz")]}
    return lines[verb]() + ["--json"]


def answer(verb: str, case: Case, code: int, doc: dict) -> tuple[str, str]:
    """(cause id, what it said) of one verb's --json document: a refusal's (`ok` false: a fleet or spec that is not
    ready, and why), else the verb's own top cause."""
    if verb in ("wait", "validate") or doc.get("ok") is False:
        return top_refusal(code, doc)
    if code not in (0, 1):
        return "error", f"exit {code}: {json.dumps(doc)[:400]}"
    return TOP[verb](doc, case)


def run_verb(b: Bench, case: Case, verb: str) -> Cell:
    cell = Cell(verb)
    t = time.monotonic()
    code, out, err = 0, "", ""
    try:
        if verb == "triage":      # the bundle first: triage reads it offline
            code, out, err = b.cli("bundle", "-f", b.f, "-o", str(b.tmp / "bundle.tar.gz"), "--force", "--json")
            if code != 0:
                raise RuntimeError(f"bundle exit {code}: {(err or out)[-300:]}")
        code, out, err = b.cli(*verb_argv(b, case, verb))
        cell.exit_code = code
        cell.cause, cell.raw = answer(verb, case, code, json.loads(out))
        if verb == "diagnose":
            cell.raw = f"({case.symptom}) {cell.raw}"
    except json.JSONDecodeError:
        cell.cause, cell.raw = "error", f"exit {code}, no JSON: {(err or out)[-400:]}"
    except Exception as exc:  # noqa: BLE001 - one verb's failure is that cell's result, not the run's
        cell.cause, cell.raw = "error", f"{type(exc).__name__}: {exc}"
    cell.seconds = round(time.monotonic() - t, 1)
    return cell


def score(cell: Cell, expect: tuple[str, ...], allowance: str) -> str:
    if cell.cause == "error":
        return "error"
    if cell.cause in expect:
        return "correct"
    if cell.cause == ABSTAIN or (cell.cause == HEALTHY and allowance.startswith("abstain ok")):
        return "abstained"
    return "wrong"


def named(cell: Cell) -> bool:
    return cell.cause not in ("n/a", "error", ABSTAIN, HEALTHY)


def one_verb_each(cases: list[Case]) -> dict[str, str]:
    """case id -> the one verb that judges it in the CI form (see the module's docstring)."""
    used = dict.fromkeys(VERBS, 0)
    chosen = {}
    for case in cases:
        answering = [v for v in case.verbs if not case.verbs[v]] or list(case.verbs)
        verb = min(answering, key=lambda v: (used[v], VERBS.index(v)))
        used[verb] += 1
        chosen[case.id] = verb
    return chosen


def failures(results: list[CaseResult]) -> list[str]:
    """What makes a run red: a wrong or failed answer, a contradiction, a failed plant, an abstention the case
    does not allow."""
    allowed = {c.id: c.verbs for c in CASES}
    bad = [f"{r.id}: plant failed: {r.plant_error}" for r in results if r.plant_error]
    bad += [f"{r.id}: verbs contradict each other" for r in results if r.contradiction]
    bad += [f"{r.id} / {verb}: {cell.score} {cell.cause}: {cell.raw[:300]}" for r in results
            for verb, cell in r.cells.items() if cell.score in ("wrong", "error")
            or (cell.score == "abstained" and not allowed[r.id][verb])]
    return bad


def contradicts(cells: dict[str, Cell], expect: tuple[str, ...]) -> bool:
    """Two verbs name different causes (the ids the case accepts count as one)."""
    return len({"planted" if c.cause in expect else c.cause for c in cells.values() if named(c)}) > 1


def run_case(b: Bench, case: Case, only_verb: str = "") -> CaseResult:
    res = CaseResult(case.id, case.title, case.expect)
    t = time.monotonic()
    log(f"case {case.id}: {case.title}")
    for node in sorted(b.planted - {case.replants}):
        b.heal(node)
        b.planted.discard(node)
    try:
        case.plant(b)
    except Exception as exc:  # noqa: BLE001 - recorded; the verbs still run against what was planted
        res.plant_error = f"{type(exc).__name__}: {exc}"
        log(f"  plant: {res.plant_error}")
    try:
        order = [v for v in ("doctor", "triage", "explain", "diagnose", "wait", "validate", "basic", "matrix")
                 if v in case.verbs and v == (only_verb or v)]
        for verb in order:
            cell = run_verb(b, case, verb)
            cell.score = score(cell, case.expect, case.verbs[verb])
            res.cells[verb] = cell
            log(f"  {verb:8} {cell.score:9} {cell.cause:18} {cell.seconds:5.1f}s  {cell.raw[:150]}")
    finally:
        if case.restore is not None:
            try:
                case.restore(b)
            except Exception as exc:  # noqa: BLE001
                log(f"  restore failed: {type(exc).__name__}: {exc}")
    res.contradiction = contradicts(res.cells, case.expect)
    res.seconds = round(time.monotonic() - t, 1)
    return res


def summarise(results: list[CaseResult]) -> dict:
    per_verb = {}
    for verb in VERBS:
        cells = [r.cells[verb] for r in results if verb in r.cells]
        if not cells:
            continue
        counts = {k: sum(1 for c in cells if c.score == k) for k in ("correct", "wrong", "abstained", "error")}
        answered = len(cells) - counts["abstained"]
        per_verb[verb] = {**counts, "applicable": len(cells), "top1": round(counts["correct"] / len(cells), 3),
                          "top1_answered": round(counts["correct"] / answered, 3) if answered else None}
    return {"per_verb": per_verb,
            "contradictions": sum(1 for r in results if r.contradiction),
            # A wrong cause, or "healthy"/"ready" where the case has a fault this verb must see: both are said
            # with confidence (an abstention never is).
            "confident_wrong": sum(1 for r in results for c in r.cells.values() if c.score == "wrong"),
            "cases": len(results)}


def table(results: list[CaseResult], summary: dict):
    """The rich table (cases x verbs, each cell the verb's top cause, green/red) and the summary line."""
    from rich.table import Table

    verbs = [v for v in VERBS if v in summary["per_verb"]]
    t = Table(title="diagnosis benchmark: each verb's top cause per planted cause")
    t.add_column("case")
    t.add_column("planted")
    for v in verbs:
        t.add_column(v)
    t.add_column("contra")
    style = {"correct": "green", "wrong": "red", "abstained": "yellow", "error": "magenta", "n/a": "dim"}
    for r in results:
        row = [r.id + (" (!plant)" if r.plant_error else ""), " | ".join(r.expect)]
        for v in verbs:
            c = r.cells.get(v)
            row.append("n/a" if c is None else f"[{style[c.score]}]{c.cause}[/]")
        row.append("[red]yes[/]" if r.contradiction else "")
        t.add_row(*row)
    t.add_section()
    for key in ("correct", "wrong", "abstained", "error"):
        t.add_row(key, "", *[str(summary["per_verb"][v][key]) for v in verbs], "")
    t.add_row("top-1", "", *[f"{summary['per_verb'][v]['correct']}/{summary['per_verb'][v]['applicable']}"
                             for v in verbs], "")
    t.add_row("top-1 answered", "", *[
        f"{summary['per_verb'][v]['correct']}/{summary['per_verb'][v]['applicable'] - summary['per_verb'][v]['abstained']}"
        for v in verbs], "")
    foot = (f"contradictions: {summary['contradictions']} case(s); confident wrong answers: "
            f"{summary['confident_wrong']}; cases: {summary['cases']}")
    return t, foot


def render_text(results: list[CaseResult], summary: dict, width: int = 220) -> str:
    from rich.console import Console

    t, foot = table(results, summary)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(t)
    console.print(foot)
    return console.export_text(styles=False)


def fleet_data(tmp: Path, nodes: int) -> Path:
    from p2p_ops.lifecycle.free_ports import choose
    from p2p_ops.spec.starter import local_fleet

    path, data = tmp / "fleet.yaml", local_fleet(nodes, name="diagbench", base=choose(nodes).base)
    # node-a alone evicts from 10 % of its 1 GB L1: the eviction case fills it with a bounded number of prompts.
    data["nodes"][0]["instances"][0]["settings"] = {"server_extra_args": ["--eviction-trigger-watermark", "0.1"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(quick: bool = False, only: Optional[list[str]] = None, tmp: Optional[Path] = None,
        on_case: Optional[Callable[[list], None]] = None, one_verb: bool = False) -> dict:
    cases = [c for c in CASES if (not quick or c.id in QUICK) and (not only or c.id in only)]
    verb_of = one_verb_each(cases) if one_verb else {}
    own_tmp = tmp is None
    tmp = Path(tempfile.mkdtemp(prefix="diagbench-")) if own_tmp else tmp
    t0 = time.monotonic()
    results: list[CaseResult] = []
    b = Bench(None, tmp)
    for case in [c for c in cases if not c.needs_fleet]:
        results.append(run_case(b, case, verb_of.get(case.id, "")))
        if on_case:
            on_case(results)
    fleet_cases = [c for c in cases if c.needs_fleet]
    timings: dict = {}
    if fleet_cases:
        nodes = 2 if quick else 3
        log(f"starting a {nodes}-node local fleet in {tmp}")
        with FleetContext.load(fleet_data(tmp, nodes)) as ctx, launch.running(ctx, timeout=150, timings=timings):
            b.ctx = ctx
            log(f"fleet ready (up {timings.get('up_s', 0):.0f} s, wait {timings.get('wait_s', 0):.0f} s)")
            for case in fleet_cases:
                results.append(run_case(b, case, verb_of.get(case.id, "")))
                if on_case:
                    on_case(results)
    summary = summarise(results)
    summary["seconds"] = round(time.monotonic() - t0, 1)
    summary["fleet"] = {k: round(v, 1) for k, v in timings.items()}
    summary["quick"] = quick
    summary["one_verb"] = verb_of
    return {"summary": summary, "cases": [asdict(r) for r in results],
            "load_average": os.getloadavg(), "when": time.strftime("%Y-%m-%dT%H:%M:%S")}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.diagnosis", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} (2 nodes, one restart)")
    ap.add_argument("--one-verb", action="store_true",
                    help="every case, each judged by one verb, chosen so every verb is used (CI's form)")
    ap.add_argument("--only", default="", help="comma-separated case ids")
    ap.add_argument("--json", default="", help="also write the results JSON here")
    ap.add_argument("--out", default="", help="results folder (default bench/results/diagnosis-<stamp>/)")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--table", default="", metavar="JSON",
                    help="only print the table of a results.json or partial.json (an interrupted run's cases), "
                         "as it was scored")
    args = ap.parse_args(argv)
    if args.table:
        got = json.loads(Path(args.table).read_text())
        done = got["cases"] if isinstance(got, dict) else got
        results = [CaseResult(**{**r, "cells": {k: Cell(**v) for k, v in r["cells"].items()}}) for r in done]
        print(render_text(results, summarise(results)))
        return 0
    if args.list:
        for c in CASES:
            print(f"{c.id:16} {c.expect[0]:22} {', '.join(c.verbs)}  {c.title}")
        return 0
    out = Path(args.out) if args.out else REPO / "bench" / "results" / (
        f"diagnosis-{time.strftime('%Y-%m-%d')}" + ("-quick" if args.quick else "-one-verb" if args.one_verb else ""))
    out.mkdir(parents=True, exist_ok=True)

    def partial(results: list) -> None:     # every finished case is kept, also when a later one fails
        (out / "partial.json").write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    data = run(args.quick, [x for x in args.only.split(",") if x] or None, on_case=partial, one_verb=args.one_verb)
    results = [CaseResult(**{**r, "cells": {k: Cell(**v) for k, v in r["cells"].items()}}) for r in data["cases"]]
    from rich.console import Console
    t, foot = table(results, data["summary"])
    Console(width=220).print(t)
    print(foot)
    text = render_text(results, data["summary"])
    extra = (f"run: {data['summary']['seconds']:.0f} s, fleet up {data['summary']['fleet']}, "
             f"load average {', '.join(f'{x:.1f}' for x in data['load_average'])}")
    print(extra)
    (out / "partial.json").unlink(missing_ok=True)
    (out / "table.txt").write_text(text + extra + "\n")
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}/table.txt and results.json")
    bad = failures(results)
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
