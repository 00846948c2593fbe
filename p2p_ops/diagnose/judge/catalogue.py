"""The one catalogue of causes: what each cause means, the evidence that confirms it, the evidence that rules it
out, its one fix and the fix's scope. Data only; `chunk.py`, `fleet.py` and `margin.py` decide which applies.

Scopes: `instance` (one server or engine), `node`, `fleet` (every node's settings), `request` (what was sent:
nothing in the fleet is wrong), `run` (how a measurement ran). A cause whose `confirmed` is False says what a
request would do but confirms no reason (nothing read says why); verbs show it as information, never as a cause.

The doctor's and the decision tree's checks are causes too; their fix is written with the finding (it names the
node and the value seen), so here they carry only how specific their evidence is (`rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

SCOPES = ("instance", "node", "fleet", "request", "run")


@dataclass(frozen=True)
class Cause:
    id: str
    means: str
    confirms: str
    rules_out: str
    fix: str
    scope: str
    confirmed: bool = True

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"cause {self.id}: scope must be one of {SCOPES}, got {self.scope!r}")


def _causes(*causes: Cause) -> dict[str, Cause]:
    return {c.id: c for c in causes}


CAUSES = _causes(
    # --- a chunk's miss, as explain judges it (chunk.py) ---
    Cause("server_down", "the target's server is not running, so its engine computes everything itself",
          "the server's pid file names no live process", "a live server process",
          "`p2pctl up` starts it again; its server.log says why it stopped", "instance"),
    Cause("engine_degraded", "the engine serves without its lmcache server and asks no cache",
          "the engine's health says degraded (not linked to its server)", "an engine linked to its server",
          "start the server, then the engine (`p2pctl up`); the doctor names what unlinked them", "instance"),
    Cause("not_registered", "the target's server is not registered with the coordinator, so it asks no peer",
          "its /status p2p_state is not `registered`", "p2p_state `registered`",
          "check coordinator_url in its env.sh and that the coordinator runs (`p2pctl status`)", "instance"),
    Cause("holdings_unknown", "where chunks live is unknown", "the coordinator's key directory did not answer",
          "a directory answer", "start the coordinator or fix its URL, then explain again", "fleet",
          confirmed=False),
    Cause("lookup_timeout", "a connected peer holds the chunk, but the target's P2P lookups time out",
          "a connected peer holds it, the target's server.log has 'P2P lookup ... timed out' lines and none of "
          "its pulls from a peer completed since its server started",
          "no timed-out lookup in its server.log; pulls it completed (then the timeouts are intermittent: the "
          "pull is shown at risk, not as a miss)", "`p2pctl diagnose \"p2p lookup timed out\"` walks the causes "
          "(a peer's transfer channel, the network between them)", "instance"),
    Cause("l1_oom", "L1 cannot hold the restore buffers",
          "the prefix's chunks up to this one exceed the target's L1 below its eviction watermark, or its "
          "prefetch fallback counter says l1_oom", "an L1 with room for the prefix's restore buffers",
          "raise settings.l1_size_gb or lower the eviction watermark", "instance"),
    Cause("peer_not_connected", "only peers the target is not connected to hold the chunk",
          "the holders are missing from the target's p2p_peers or their servers are not running",
          "a running holder among its p2p_peers", "`p2pctl status` shows each server's peers; `p2pctl doctor` "
          "names why one is missing", "instance"),
    Cause("tokens_differ", "two engines tokenize the prompt differently",
          "a peer holds the range as its own engine tokenized it, differing at a named token",
          "the same tokens from both engines", "one tokenizer and chat template on every engine", "fleet"),
    Cause("keys_differ", "the target keys chunks differently from the peers",
          "a key input differs (chunk size, hash algorithm, model name, world size, cache salt, NONE_HASH)",
          "a serving peer with the same key inputs", "one value fleet-wide in fleet.yaml's settings, then "
          "`p2pctl render` and restart the servers", "fleet"),
    Cause("prompt_differs", "the prompt differs from what was computed at this chunk, so it and every later "
          "chunk miss (keys chain on their parent)",
          "a held chunk after the same parent whose tokens nearly match, or the chunks before this one held "
          "while nothing could have removed this one", "a server down (what it held is not listed), or an "
          "eviction that could have removed this chunk",
          "nothing in the fleet is wrong: send the shared part first and unchanged (system prompt, document), "
          "the varying text after it", "request"),
    Cause("holder_down", "the instance that computed the prompt is not running: what it held went with it",
          "a record or the directory names the holder, and its server is not running", "a live holder",
          "`p2pctl up` starts it; its L1 starts empty, so the next request computes the prompt once more",
          "instance"),
    Cause("evicted", "the holder's L1 evicted it to stay under its watermark",
          "the run that computed the prompt names its holder, who no longer lists it, and its eviction loop ran",
          "a live server that still holds the chunk", "raise settings.l1_size_gb to keep more prefixes, or "
          "send shorter ones", "instance"),
    Cause("not_held", "the holder no longer lists the prompt, and no eviction ran there",
          "the run that computed it names a holder that lists nothing of it", "an eviction (then: evicted)",
          "explain the original prompt or its run: a restart or a cleared cache leaves nothing to read",
          "instance", confirmed=False),
    Cause("not_confirmed", "no server holds it and the evidence does not say why",
          "evictions ran or other prompts are held, but nothing ties this prompt to them", "-",
          "explain the original prompt (or `--run` with the run that sent it): a server that still holds it "
          "rules out eviction; `p2pctl test basic --prompt-file` saves a prompt explain compares against",
          "request", confirmed=False),
    Cause("cold", "nobody ever computed it here", "no server holds it and nothing was ever evicted or held",
          "a held chunk, an eviction", "send it once: the first request computes and stores it", "request",
          confirmed=False),
    Cause("judged", "a state explained by the judge's more specific cause", "the doctor's finding about it",
          "-", "the judge's fix, shown with it", "instance"),
    Cause("prefix_broken", "LMCache serves only a prefix, so a chunk after the first miss is recomputed",
          "an earlier chunk of the prompt misses", "-", "the first missing chunk's fix", "request"),
    Cause("partial", "a partial last chunk is never cached", "fewer tokens than a chunk after the last full one",
          "-", "none: LMCache stores and looks up full chunks only", "request"),
    Cause("shorter_than_chunk", "the prompt is shorter than one chunk", "fewer tokens than the chunk size", "-",
          "none, or a smaller settings.chunk_size (every server's, as keys depend on it)", "request"),
    # --- what kills a server at start (`validate` refuses each in a spec; the doctor names it from a dead server's log,
    # where an env.sh edited by hand or a spec from before the refusal put it: doctor/start.py) ---
    Cause("l1_misaligned", "the server died at start: its L1 is not a whole number of l1_align_bytes pages, so NIXL "
          "could not lay its transfer descriptors over it", "the dead server's log has NIXL_ERR_NOT_FOUND from "
          "prep_xfer_dlist and its env.sh's int(l1_size_gb * 2**30) bytes are not a multiple of l1_align_bytes",
          "an L1 of whole pages", "one of the nearest whole-page sizes as l1_size_gb (`p2pctl validate` names "
          "them), then restart the server", "instance"),
    Cause("no_transfer_channel", "the server died at start: LMCache 0.5.6 has no transfer channel of the engine it "
          "was given (only nixl and mooncake_te)", "the dead server's log says 'Unsupported transfer_channel_type'",
          "a server that built its transfer channel", "settings.transfer_engine nixl (or mooncake_te), then restart "
          "every server", "fleet"),
    Cause("server_args_clash", "the server died at start: LMCache refused an extra server flag beside what the spec "
          "sets (--l1-manager beside the L1 flags, a GDS or Device-DAX L1 with P2P, a hugepage or Device-DAX L1 with "
          "shm_transport, --disable-observability with cache_events)", "the dead server's log has LMCache's refusal "
          "naming both", "-", "remove the flag from server_extra_args (`p2pctl validate` names it and the setting), "
          "then restart the server", "instance"),
    # --- what a proof's own requests show (request.py: `test basic`, `test matrix`) ---
    Cause("request_failed", "a request of the proof failed", "the request's error", "a completed request",
          "check its engine (`p2pctl status`, engine.log)", "instance"),
    Cause("kv_mismatch", "pulled KV bytes disagree with what the target computes itself",
          "the target's KV-mismatch counter rose during the pull", "no mismatched token",
          "one engine.profile on every peer; a transfer that mis-lays bytes is a bug to report with `p2pctl "
          "bundle`", "fleet"),
    Cause("own_l1", "the target hit its own L1: the prompt was seen there before, so no pull was tested",
          "its server counted L1-hit tokens and neither a P2P load nor peer-served tokens",
          "a completed P2P load or peer-served tokens", "rerun with a new --seed", "run"),
    Cause("answer_differs", "the target used cached KV but answered differently from the source",
          "cached tokens and a different completion", "the same completion",
          "one model on every engine (engine.model_seed, layers, profile)", "fleet"),
    # --- a miss a server's counters measured (l2_prefetch_failure reasons; `evicted`, `l1_oom` above) ---
    Cause("l1_contended", "the chunk was write-locked by a concurrent store",
          "l2_prefetch_failure{reason=l1_contended} rose", "-", "stagger identical prefixes", "request"),
    Cause("not_found", "the owner evicted the chunk between lookup and load",
          "l2_prefetch_failure{reason=not_found} rose", "-", "give owners more L1", "instance"),
    # --- why a measured margin is what it is (margin.py: placement's P2P margin, calibrate's crossover) ---
    Cause("failed_requests", "requests failed with P2P on", "more failures with P2P on than off", "-",
          "the run's failed requests name their error; `p2pctl test basic` checks the pull", "run"),
    Cause("moved_unserved", "later turns went to another node than their document's and no peer served them",
          "no pull happened, yet later turns recomputed", "-", "`p2pctl test basic` on the P2P fleet names why "
          "no peer served them", "run", confirmed=False),
    Cause("no_pull_needed", "the policy kept each session where its document was: P2P added only lookups",
          "no pull happened and every later turn hit", "a later turn that recomputed",
          "none: this policy needs no P2P at this load", "run"),
    Cause("channel_poll", "each P2P server's NIXL transfer channel busy-polls a core (nixl 1.5.1)",
          "recomputes took longer with P2P on while nothing was pulled", "recomputes as fast with P2P on",
          "give the servers their own cores, or measure on a box with cores to spare", "node"),
    Cause("pull_replaced_nothing", "every pulled document would have been a local hit or was recomputed anyway",
          "pulls happened, yet no fewer tokens were recomputed", "fewer tokens recomputed with P2P on",
          "none: this policy's placement leaves no recompute for P2P to save", "run"),
    Cause("cores_contended", "the pulls' work competed with the engines' compute on shared cores",
          "recomputed turns got slower with P2P on", "recomputes as fast with P2P on",
          "give the servers their own cores, or measure on an idle box", "node"),
    Cause("pull_costlier", "a pulled prefix cost more than the prefill it saved",
          "cache hits slower with P2P on than local hits off", "-",
          "`p2pctl calibrate` gives the prefix length from which a pull pays", "fleet"),
    Cause("variation", "run-to-run variation on a shared box", "a margin within the noise", "-",
          "more repeats, or an idle box", "run", confirmed=False),
    Cause("no_gpu_profile", "the recompute leg is this box's CPU, so the crossover says nothing about a GPU",
          "no emulated timing profile", "-", "`--timing` with a GPU profile", "run"),
    Cause("per_token_cost", "each pulled token costs more than the profile's prefill",
          "the fitted per-token pull cost at or above the prefill's", "-",
          "a faster pull path (RDMA) than this box's", "node"),
    Cause("round_trips", "a pull's fixed round trips set the length from which it pays",
          "the fitted fixed cost over the per-token gap", "-", "longer prefixes than the break-even", "run"),
    Cause("no_pull_seen", "no P2P hit, and no fallback or eviction was counted", "-", "-",
          "`p2pctl test basic` explains a miss", "run", confirmed=False),
)

# Why a pull missed, as a server's counters measure it (the reason label of LMCache's l2_prefetch_failure and the
# holder's eviction loop): the causes explain, the tree's metric checks and calibrate name a measured miss with.
MEASURED = ("l1_oom", "l1_contended", "not_found", "evicted")
UNCONFIRMED = tuple(c.id for c in CAUSES.values() if not c.confirmed)

# How specific a check's evidence is about *why* (check ids are the tree's, `doctor:<check>` for the doctor's
# findings): 0 a consequence of another finding that says so, ranked below everything so the cause comes first
# (an engine degraded because its server is down or disagrees with its peers); 1 a state that many causes
# produce (a process down, a Traceback, no RDMA device); 2 the symptom's own signature or a pressure gauge; 3
# (every other check) a setting or fact checked against what it must be, or a log line that names the reason.
CHECK_RANK = {"doctor:engine_degraded": 0, **dict.fromkeys((
    "doctor:process", "doctor:server_http", "doctor:port_listening", "doctor:peer_count", "engines:health",
    "log:traceback", "node:rdma"), 1), **dict.fromkeys((
        "log:nixl_err_backend", "log:p2p_lookup_timeout", "log:p2p_load_timeout", "log:remote_disconnect",
        "log:endpoint_timeout", "metric:l1_usage", "metric:l1_evictions", "metric:active_lookup_jobs",
        "status:locks"), 2)}
# The scope of a doctor finding's fix by check (`agree:<key>` as `agree`); every other check's is its instance.
CHECK_SCOPE = {**dict.fromkeys(("agree", "coordinator", "ports", "kv_events", "no_transfer_channel"), "fleet"),
               **dict.fromkeys(("memlock", "mooncake", "node", "port_busy"), "node")}
# Doctor findings that are true but explain no missed pull: a listener wider than loopback, the router's KV
# events, a missing env.sh the doctor rendered in its place.
NOT_A_MISS = frozenset({"bind:wide", "kv_events", "env_file"})


def specificity(check: str) -> int:
    return CHECK_RANK.get(check, 3)


def check_scope(check: str) -> str:
    return CHECK_SCOPE.get(check.split(":", 1)[0] if check.startswith("agree:") else check, "instance")


def measured_cause(reason: str) -> str:
    c = CAUSES.get(reason) if reason in MEASURED else None
    return f"{reason}: {c.means}: {c.fix}" if c else f"{reason}: a fallback reason this toolkit does not know"
