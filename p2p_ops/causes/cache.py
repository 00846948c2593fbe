"""The catalogue, part 3: why a chunk misses (explain, `judge/chunk.py`), what a proof's own requests show (`test
basic` and `test matrix`), the misses a server's counters measure, and why a measured P2P margin is what it is
(calibrate, `bench placement`). Its evidence is the rules' (`judge/*.py`); here is what each cause means and its fix.
"""

from __future__ import annotations

from p2p_ops.causes.verdict import Cause as C

CAUSES = (
    # --- a chunk's miss, as explain judges it ---
    C("holdings_unknown", "fleet", "where chunks live is unknown: the coordinator's key directory did not answer",
      "start the coordinator or fix its URL, then explain again", confirmed=False),
    C("lookup_timeout", "instance", "a connected peer holds the chunk, but the server's P2P lookups time out: a "
      "timed-out lookup counts as a miss (beside completed pulls the timeouts are intermittent, a risk)",
      "check the mq ports peers reach (`p2pctl doctor`), the owner's load and --p2p-lookup-timeout; `p2pctl "
      "diagnose \"p2p lookup timed out\"` walks the causes", rank=2),
    C("load_timeout", "instance", "a pull from a peer did not finish, or the owner lost the chunk: counted as a "
      "failure", "check the owner's load and the mq ports peers reach (`p2pctl doctor`); --p2p-load-timeout bounds "
      "the wait", rank=2),
    C("l1_oom", "instance", "L1 cannot hold the restore buffers of the prefix below its eviction watermark, so the "
      "prefetch falls back to recompute", "raise settings.l1_size_gb or lower the eviction watermark"),
    C("tokens_differ", "fleet", "two engines tokenize the prompt differently", "one tokenizer and chat template on "
      "every engine"),
    C("cache_salt_differs", "request", "requests carry different cache_salts, which are part of every chunk key",
      "send requests that should share with the same cache_salt"),
    C("prompt_differs", "request", "the prompt differs from what was computed at this chunk, so it and every later "
      "chunk miss (keys chain on their parent)", "nothing in the fleet is wrong: send the shared part first and "
      "unchanged (system prompt, document), the varying text after it"),
    C("evicted", "instance", "the holder's L1 evicted it to stay under its eviction watermark",
      "raise settings.l1_size_gb to keep more prefixes, or send shorter ones; `p2pctl explain --run RUN` tells for "
      "one request whether its holder evicted it", rank=2),
    C("not_held", "instance", "the holder no longer lists the prompt, and no eviction ran there (a restart, or a "
      "cleared cache)", "explain the original prompt or its run: a restart or a cleared cache leaves nothing to "
      "read", confirmed=False),
    C("not_confirmed", "request", "no server holds it and the evidence does not say why (an eviction, or a prompt "
      "that differs in its first chunk, look the same)", "explain the original prompt (or `--run` with the run that "
      "sent it): a server that still holds it rules out eviction; `p2pctl test basic --prompt-file` saves a prompt "
      "explain compares against", confirmed=False),
    C("cold", "request", "nobody ever computed it here", "send it once: the first request computes and stores it",
      confirmed=False),
    C("prefix_broken", "request", "LMCache serves only a prefix, so a chunk after the first miss is recomputed",
      "the first missing chunk's fix"),
    C("partial", "request", "a partial last chunk is never cached", "none: LMCache stores and looks up full chunks "
      "only"),
    C("shorter_than_chunk", "request", "the prompt is shorter than one chunk",
      "none, or a smaller settings.chunk_size (every server's, as keys depend on it)"),
    # --- misses a server's counters measured (the reason label of LMCache's l2_prefetch_failure) ---
    C("l1_contended", "request", "the chunk was write-locked by a concurrent store", "stagger identical prefixes"),
    C("not_found", "instance", "the owner evicted the chunk between lookup and load", "give owners more L1"),
    # --- what a proof's own requests show (`test basic`, `test matrix`) ---
    C("request_failed", "instance", "a request of the proof failed",
      "check its engine (`p2pctl status`, {instance}/engine.log)"),
    C("kv_mismatch", "fleet", "pulled KV bytes disagree with what the target computes itself: a corrupted or "
      "mis-laid transfer, or peers whose engine.profile differs", "one engine.profile on every peer; a transfer "
      "that mis-lays bytes is a bug to report with `p2pctl bundle`"),
    C("own_l1", "run", "the target hit its own L1: the prompt was seen there before, so no pull was tested",
      "rerun with a new --seed"),
    C("answer_differs", "fleet", "the target used cached KV but answered differently from the source: the engines "
      "disagree on the model, or the pulled KV bytes are wrong", "one model on every engine (engine.model_seed, "
      "layers, profile)"),
    # --- why a measured margin is what it is (placement's P2P margin, calibrate's crossover) ---
    C("failed_requests", "run", "requests failed with P2P on", "the run's failed requests name their error; "
      "`p2pctl test basic` checks the pull"),
    C("moved_unserved", "run", "later turns went to another node than their document's and no peer served them",
      "`p2pctl test basic` on the P2P fleet names why no peer served them", confirmed=False),
    C("no_pull_needed", "run", "the policy kept each session where its document was: P2P added only lookups",
      "none: this policy needs no P2P at this load"),
    C("channel_poll", "node", "each P2P server's NIXL transfer channel busy-polls a core (nixl 1.5.1)",
      "give the servers their own cores, or measure on a box with cores to spare"),
    C("pull_replaced_nothing", "run", "every pulled document would have been a local hit or was recomputed anyway",
      "none: this policy's placement leaves no recompute for P2P to save"),
    C("cores_contended", "node", "the pulls' work competed with the engines' compute on shared cores",
      "give the servers their own cores, or measure on an idle box"),
    C("pull_costlier", "fleet", "a pulled prefix cost more than the prefill it saved",
      "`p2pctl calibrate` gives the prefix length from which a pull pays"),
    C("variation", "run", "run-to-run variation on a shared box", "more repeats, or an idle box", confirmed=False),
    C("no_gpu_profile", "run", "the recompute leg is this box's CPU, so the crossover says nothing about a GPU",
      "`--timing` with a GPU profile"),
    C("per_token_cost", "node", "each pulled token costs more than the profile's prefill",
      "a faster pull path (RDMA) than this box's"),
    C("round_trips", "run", "a pull's fixed round trips set the length from which it pays",
      "longer prefixes than the break-even"),
    C("no_pull_seen", "run", "no P2P hit, and no fallback or eviction was counted",
      "`p2pctl test basic` explains a miss", confirmed=False),
)
