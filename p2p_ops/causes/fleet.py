"""The catalogue, part 1: the fleet's processes, membership, the settings peers must agree on, and what a node
needs installed (the doctor, `wait`, `validate`, the preflight of `probe` and `up`, the tree's first symptoms)."""

from __future__ import annotations

from p2p_ops.causes.verdict import Cause as C

RESTART = "start it again from fleet.yaml: {restart}"

CAUSES = (
    # --- processes ---
    C("server_down", "instance", "a server of the fleet is not running: its engine computes everything itself, its "
      "peers go on without it, and what it held went with it",
      f"read {{instance}}/server.log for why it stopped, then {RESTART} (its L1 starts empty)", rank=1),
    C("server_unresponsive", "instance", "the server process runs but does not answer /status",
      "read {instance}/server.log: its HTTP port may be taken, or the server is stuck", rank=1),
    C("port_not_listening", "instance", "a process runs but nothing listens on its port",
      "read {log}: the process may still be starting, or it failed to bind", rank=1),
    C("engine_down", "instance", "an engine is not running, or its process runs but /health does not answer "
      "(still loading, or wedged on its server)", f"read {{instance}}/engine.log, then {RESTART}", rank=1),
    C("engine_degraded", "instance", "the engine serves without its lmcache server: it neither stores nor pulls "
      "anything, so the fleet shares nothing through it", "fix the server it cannot use (the other causes about "
      "{instance} name why); the engine relinks by itself once its server agrees", rank=0),
    C("traceback", "instance", "a process logged an unhandled exception; the lines after it name the error",
      "read {log} from the first Traceback and follow the most specific cause found beside it", rank=1),
    C("node_unreadable", "node", "the node could not be read (connection, authentication, host key)",
      "check the connection: `p2pctl probe --node {node}`"),
    C("port_busy", "node", "a port of the fleet is taken by another process: what should listen there fails to start",
      "stop what holds it, or pick another port in fleet.yaml and re-render (`p2pctl doctor` names the port "
      "and its holder)"),
    C("bind_wide", "node", "a fleet process listens outside the addresses its node allows",
      "set the node's bind (or coordinator.host / prometheus.host) to its address and re-render", rank=-1),
    C("ucx_listens_wide", "node", "NIXL's transfer channel (UCX) listens on a random port on every interface",
      "set settings.ucx_net_devices to the interface of the node's address (lo for a local fleet), re-render and "
      "restart", rank=-1),
    C("kv_events_off", "instance", "an engine publishes no KV events, so the router cannot see what it holds",
      f"{RESTART} (router.kv_events: true)", rank=-1),
    # --- the coordinator and membership ---
    C("coordinator_down", "fleet", "the coordinator is not running or not healthy: servers cannot register or "
      "discover peers, and each drops its peer adapters after 4 missed polls",
      f"read coordinator/coordinator.log (port in use, bind address), then {RESTART}"),
    C("coordinator_url_wrong", "instance", "the server talks to another coordinator than the fleet's: it registers "
      "nowhere (or in another fleet) and sees no peers",
      "set LMCACHE_COORDINATOR_URL={url} (`p2pctl render` writes it), then restart the server: {restart}"),
    C("not_registered", "instance", "the server is not registered with the coordinator (its p2p_state is not "
      "registered, or /instances does not list it): it asks no peer and no peer finds it",
      "check the coordinator and the server's LMCACHE_COORDINATOR_URL (`p2pctl doctor`); its server.log names "
      "the reason in 'P2P instance discovery failed' or 'Coordinator registration/heartbeat failed'"),
    C("registration_failed", "instance", "the server cannot register, heartbeat or discover peers through the "
      "coordinator: a wrong URL, a firewall, or the coordinator down or bound to another address",
      "the log line names the reason: connection refused = wrong host or port, or the coordinator is down "
      "(`p2pctl diagnose \"peers not registered\"`)"),
    C("keepalive_short", "fleet", "the coordinator closes idle keep-alive connections before the next heartbeat "
      "reuses them, so servers flap between registered and unregistered",
      "raise coordinator.timeout_keep_alive above the heartbeat interval (p2pctl renders it so) and restart the "
      "coordinator"),
    C("instance_evicted", "instance", "the coordinator dropped a server that missed heartbeats for "
      "--instance-timeout (30 s): dead, frozen, or unable to reach it",
      "read that server's log; a dead server leaves /instances 30-40 s after its last heartbeat", rank=2),
    C("not_advertised", "instance", "the server registered without a P2P URL or mq port: peers skip it",
      "start the server with --p2p-advertise-url (LMCACHE_P2P_ADVERTISE_URL, which `p2pctl render` writes)"),
    C("advertise_stale", "instance", "the server advertises another P2P URL than it is configured for",
      "restart the server so it registers its current URL: {restart}"),
    C("foreign_instance", "fleet", "the coordinator lists an instance that is not in this fleet (a stale entry, or "
      "another fleet shares the coordinator)", "give each fleet its own coordinator.port; stale entries leave "
      "after --instance-timeout (30 s)"),
    C("peer_not_connected", "instance", "a server is not connected to every running peer, so it cannot pull what "
      "they hold", "wait one poll interval; a peer missing for longer is not registered or not reachable: "
      "`p2pctl status` shows each server's peers, `p2pctl doctor` names why one is missing", rank=1),
    C("peer_unreachable", "instance", "a node cannot open a TCP connection to a peer's advertised P2P URL, its mq "
      "port or the coordinator: lookups and handshakes fail",
      "bind the server to an address peers can reach (node.bind / --host), open the port in the firewall, and "
      "check the advertised address (LMCACHE_P2P_ADVERTISE_URL)"),
    C("adapter_failed", "instance", "the server saw a peer but could not build its P2P adapter (handshake, NIXL)",
      "read the lines after it in {log}: a handshake that timed out, or a peer on another transfer engine"),
    C("handshake_timeout", "instance", "a peer's transfer-channel handshake got no reply in 60 s: the peer is on "
      "another transfer engine, wedged, or its advertised P2P URL is unreachable",
      "put every server on one settings.transfer_engine (`p2pctl doctor` names the odd one out); without a "
      "mismatch, check that peers reach the advertised P2P URL"),
    # --- what peers must agree on (spec/agreement.py names one of these per key) ---
    C("hash_seed_differs", "fleet", "peers run with different PYTHONHASHSEEDs: chunk keys under the builtin hash (or "
      "whenever vLLM is importable) and vLLM's block hashes depend on it, so they share nothing (under blake3 "
      "it is harmless)", "one settings.python_hash_seed in fleet.yaml; restart what differs from it "
      "(PYTHONHASHSEED={want}): {restart}"),
    C("chunk_size_differs", "fleet", "peers cut prompts into chunks of different sizes, so every chunk key differs",
      "one settings.chunk_size in fleet.yaml (the coordinator's --chunk-size too); restart what differs from it "
      "(chunk_size={want}): {restart}"),
    C("hash_algorithm_differs", "fleet", "peers hash chunks with different algorithms, so every chunk key differs",
      "one settings.hash_algorithm in fleet.yaml; restart what differs from it (hash_algorithm={want}): {restart}"),
    C("none_hash_differs", "fleet", "the hash chain starts differently on these servers (NONE_HASH), so every "
      "chunk key differs", "make PYTHONHASHSEED, hash_algorithm and the vLLM version identical, then restart "
      "what differs: {restart}"),
    C("builtin_hash", "fleet", "LMCache fell back to Python's builtin hash(): NONE_HASH then differs per process "
      "even with equal PYTHONHASHSEEDs, so these servers share nothing",
      "set settings.hash_algorithm: blake3 (only runtime: vllm may use builtin or sha256_cbor), then restart: "
      "{restart}"),
    C("model_differs", "fleet", "engines serve different model names, and the name is part of every cache key",
      "serve one model name on every engine; restart what differs (model={want}): {restart}"),
    C("world_size_differs", "fleet", "engines run with different tensor-parallel sizes, and the world size is part "
      "of every cache key", "run every engine with the same tensor-parallel size: {restart}"),
    C("engine_model_differs", "fleet", "engines run different models (seed, layers, heads, KV profile): the same KV "
      "means something else to another model", "one engine.model_seed and shape for the fleet; restart what "
      "differs: {restart}"),
    C("vllm_args_differ", "fleet", "vLLMs differ in how their KV blocks are laid out (block size, parallel layout, "
      "dtype, KV-cache dtype, model or revision): a block means other bytes on each",
      "the same {setting} on every vLLM (vllm.block_size; --tensor/--pipeline-parallel-size, --dtype and "
      "--kv-cache-dtype in vllm.args; vllm.model_path and --revision), then restart what differs: {restart}"),
    C("l1_align_differs", "fleet", "peers register L1 with different alignments, which NIXL's page-index math on "
      "both ends depends on", "one settings.l1_align_bytes (65536) in fleet.yaml; restart what differs "
      "(l1_align_bytes={want}): {restart}"),
    C("transfer_engine_differs", "fleet", "servers on different transfer engines (nixl, mooncake_te) cannot decode "
      "each other's handshake ('Object missing required field'): the dialer waits 60 s and retries forever, and "
      "the server that got the bad request keeps a wedged handshake socket until it restarts",
      "one settings.transfer_engine for every server; restart what differs (transfer_engine={want}) and every "
      "server that logged 'Object missing required field': {restart}"),
    C("ucx_tls_differs", "fleet", "servers use different UCX_TLS lists: peers must share a transport",
      "one settings.ucx_tls for the fleet; restart what differs (UCX_TLS={want}): {restart}"),
    C("versions_differ", "fleet", "nodes run different versions of a package peers exchange data with: P2P "
      "payloads are not compatible across versions",
      "install one {package} version on every node (`pip install {package}==<version>`), then restart what runs "
      "it: {restart}"),
    # --- env files ---
    C("stale_env", "instance", "env.sh changed after the server started: the running server still uses the old "
      "value", "restart the server, which re-renders env.sh from fleet.yaml (or revert the edit): {restart}"),
    C("env_drift", "instance", "an env.sh no longer matches what fleet.yaml renders: edited by hand, or rendered "
      "from an older spec", "re-render it and restart only what reads it: {restart}"),
    C("env_not_rendered", "instance", "no env.sh yet: the doctor compared what fleet.yaml renders",
      "`p2pctl render` (or `p2pctl up`) writes it", rank=-1),
    # --- what a node needs installed (preflight: `probe`, `up`) ---
    C("python_missing", "node", "the node's Python environment is missing or broken",
      "create the virtualenv (`p2pctl probe --bootstrap`) or fix the node's venv in fleet.yaml"),
    C("lmcache_missing", "node", "lmcache is not installed in the node's Python",
      "install the node runtime there (`make setup`, or the README's node lines ending in pip install '.[node]')"),
    C("lmcache_untested", "node", "the node's lmcache is not the version this toolkit is tested with",
      "install lmcache=={pin} (`p2pctl probe --bootstrap`)", rank=-1),
    C("nixl_missing", "node", "NIXL is not installed in the Python that runs the servers, and transfer_engine is "
      "nixl", "install nixl-cu12==1.5.1, then nixl==1.5.1 with --no-deps, in that venv (`make setup` does)"),
    C("vllm_missing", "node", "runtime is vllm but the node has no vLLM to run",
      "install vLLM there (`make setup-vllm`), or set vllm.venv / nodes[].vllm_venv to the venv that holds it"),
    C("model_missing", "node", "the model vLLM should load is not on the node",
      "make one with `p2pctl make-model {path}`, or fix vllm.model_path"),
    C("model_not_cached", "node", "the model is not in the node's model cache: vLLM downloads it at start "
      "(network, maybe HF_TOKEN)", "pre-fetch it with `huggingface-cli download {model}`", rank=-1),
    C("no_gpu", "node", "runtime is vllm on cuda but the node shows no GPU",
      "on CPU nodes use vllm.device: cpu (vLLM's CPU build) or runtime: embedded"),
    C("gpus_missing", "node", "instances ask for GPUs the node does not have", "fix instances[].gpu (the node has "
      "{have})"),
    C("disk_low", "node", "little free disk where the run folder is", "free space on {mount} or put the run folder "
      "elsewhere (--run-dir): logs and runs want more than {need}", rank=-1),
    C("mooncake_broken", "node", "Mooncake does not import in the node's venv (a CUDA build on a CPU node, no "
      "libibverbs1): every lmcache server of that venv exits at start, saying it \"requires the full lmcache "
      "installation with CUDA extensions\"",
      "run `make setup-mooncake` on that node, or `p2pctl probe --bootstrap` (the build matching the node; Debian "
      "libibverbs1 libnuma1 libcurl4 first: scripts/test_deps.sh), or use transfer_engine: nixl"),
    C("mooncake_no_rnic", "node", "Mooncake was forced onto RDMA (MC_FORCE_HCA, or MC_TE_DEVICE names HCAs) on a "
      "node without a usable RNIC: the server exits", "settings.mooncake_protocol tcp, or fix "
      "settings.mooncake_device / the NIC plan; or go back to transfer_engine: nixl"),
    C("mooncake_segment_desc", "node", "Mooncake logs 'Local segment descriptor not found' at every start, before "
      "its transport is installed: harmless unless it repeats after the start",
      "nothing, unless it repeats after the start: then read the server log around it", rank=0, confirmed=False),
    C("p2p_refused_l1", "fleet", "LMCache refuses P2P with an L1 that is not one contiguous registered region (GDS, "
      "Device-DAX): the server exits at start", "remove {flag} from server_extra_args, or set settings.p2p: false"),
)
