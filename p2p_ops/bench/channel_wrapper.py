"""The client side of `p2p_ops.bench.channel`: LMCache's transfer-channel benchmark, run unchanged through a few
lines that print what the tool keeps to itself and, for concurrent clients, hold the reads until a common start.

- `[p2p] times_ms [...]` after LMCache's report: p50/p99 come from these;
- `[p2p] main returned N`: LMCache 0.5.6's client can segfault at interpreter exit after a complete run, and
  this line tells that crash from one during the reads;
- with `P2P_START_AT` (a Unix time) set, the client waits after connecting until then and prints
  `[p2p] start wait S` (negative: it came late).
"""

CLIENT_WRAPPER = (
    "import json, sys\n"
    "from lmcache.tools.transfer_channel_benchmark import __main__ as m, benchmark as b\n"
    "_r = getattr(b, '_report', None)\n"
    "if _r:\n"
    "    def _report(cfg, times):\n"
    "        _r(cfg, times); print('[p2p] times_ms ' + json.dumps([t * 1e3 for t in times]), flush=True)\n"
    "    b._report = _report\n"
    # Concurrent clients (p2p_ops.bench.transfer_patterns) read together: each waits, once connected, for P2P_START_AT.
    "import os, time\n"
    "_at = float(os.environ.get('P2P_START_AT') or 0)\n"
    "if _at:\n"
    "    _init = b.initialize_transfer_channel_context\n"
    "    def _gated(*a, **k):\n"
    "        ctx = _init(*a, **k); get = ctx.get_transfer_channel_client\n"
    "        def client(url):\n"
    "            c = get(url); w = _at - time.time()\n"
    "            print(f'[p2p] start wait {w:.3f}', flush=True); time.sleep(max(w, 0)); return c\n"
    "        ctx.get_transfer_channel_client = client\n"
    "        return ctx\n"
    "    b.initialize_transfer_channel_context = _gated\n"
    "_rc = m.main()\n"
    "print(f'[p2p] main returned {_rc}', flush=True)\n"
    "sys.exit(_rc)\n")
