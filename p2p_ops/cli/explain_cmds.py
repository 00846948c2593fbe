"""`p2pctl explain`: for one prompt, per node and per chunk: its key, who holds it, what a request would do
(local hit, pull from a named peer, recompute) and why a node would miss it.

Exit codes: 0 every full chunk is served on every node explained, 1 some would be recomputed, 2 bad input or
could not explain. `--json` prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse

from p2p_ops.cli.common import context, done, progress_unless_json, verb
from p2p_ops.diagnose import explain
from p2p_ops.errors import BadInput


def prompt_spec(args: argparse.Namespace) -> explain.PromptSpec:
    given = [n for n in ("prompt", "prompt_file", "messages", "run") if getattr(args, n)]
    if len(given) != 1:
        raise BadInput("give exactly one of --prompt TEXT, --prompt-file FILE, --messages FILE.json or --run "
                       f"RUN_DIR (got {', '.join('--' + g.replace('_', '-') for g in given) or 'none'})")
    if args.request and not args.run:
        raise BadInput("--request names a request of a test run: add --run RUN_DIR")
    if args.prompt:
        return explain.from_text(args.prompt)
    if args.prompt_file:
        return explain.from_file(args.prompt_file)
    if args.messages:
        return explain.from_messages(args.messages)
    return explain.from_run(args.run, args.request)


def _targets(ctx, names: list[str]) -> list[str]:
    """The instances --node names: a node's, or an instance by its id; none given, every instance."""
    ids = [i.id for _, i in ctx.fleet.instances()]
    by_node = {n.name: [i.id for i in n.instances] for n in ctx.fleet.nodes}
    out = [] if names else ids
    for name in names:
        if name not in by_node and name not in ids:
            raise BadInput(f"--node {name}: no such node or instance; known: " + ", ".join(by_node))
        out += by_node.get(name, [name])
    return out


def cmd_explain(args: argparse.Namespace) -> int:
    spec = prompt_spec(args)
    with context(args) as ctx:
        say = progress_unless_json(args)
        result = explain.run(ctx, spec, _targets(ctx, args.node or []), salt=args.cache_salt, progress=say)
    say(explain.time_line(result))
    code = explain.exit_code(result)
    return done(args, result.to_dict() | {"exit_code": code},
                lambda: print("\n".join(explain.render_text(result, strip_only=args.strip))), code)


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "explain", cmd_explain,
             help="for one prompt: which chunk each node holds, who would serve it, why a node misses",
             description="Explain a prompt's cache path on a running fleet. For each node and each chunk: "
             "the chunk key under that node's own settings (LMCache's hasher, run on the node), whether the "
             "node holds it (the coordinator's key directory), which peers hold it, and what a request "
             "would do there: a local hit, a pull from a named peer, or a recompute with its reason (keys "
             "that differ and the setting that makes them differ, a peer not connected, lookups timing "
             "out, the chunk evicted, a prompt shorter than a chunk, tokens that differ between engines, a "
             "prompt that differs in its first chunk). Read-only: it sends no request, prefetch or pull.",
             epilog="example: p2pctl explain --run p2p-run/demo/tests/20261201T101500Z-basic --request b "
                    "--node node-b")
    p.add_argument("--prompt", help="the prompt text")
    p.add_argument("--prompt-file", metavar="FILE", help="a file holding the prompt text")
    p.add_argument("--messages", metavar="FILE", help="a JSON list of chat messages ({role, content}); the "
                   "engines' chat template is applied")
    p.add_argument("--run", metavar="RUN_DIR", help="a test run folder (p2pctl test basic|stress); with "
                   "--request, that request, else its first one not served from cache")
    p.add_argument("--request", metavar="ID", help="with --run: a request id of its prompts.jsonl (basic: a, b, "
                   "control_b; stress: the row of requests.csv)")
    p.add_argument("--node", action="append", metavar="NODE",
                   help="explain on this node or instance (repeatable; default: every instance)")
    p.add_argument("--cache-salt", default="", help="the cache_salt the requests carry (default: none)")
    p.add_argument("--strip", action="store_true", help="only the per-chunk strip of each node")
