"""`p2pctl make-model DIR`: a tiny local Llama for vLLM fleets on boxes that cannot download a model."""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

from p2p_ops.cli import output
from p2p_ops.cli.common import done, verb
from p2p_ops.harness.local_model import ModelSpec, make_model


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "make-model", cmd_make_model, fleet=False,
             help="write a tiny seeded Llama (safetensors, tokenizer, chat template)",
             description="Write a tiny Llama that vLLM can serve, made here from a seed: no download. Point "
             "vllm.model_path (or `p2pctl init --runtime vllm --model-path`) at it.",
             epilog="exit codes: 0 written, 2 bad input or missing packages")
    p.add_argument("dir", help="folder to write (created; refused if it holds something else)")
    p.add_argument("--seed", type=int, default=ModelSpec.seed, help="weights and tokenizer seed (default %(default)s)")
    p.add_argument("--force", action="store_true", help="write into a non-empty folder")


def cmd_make_model(args: argparse.Namespace) -> int:
    t = time.monotonic()
    # The spinner is progress: stderr, so stdout holds only the result (the JSON document with --json).
    spinner = nullcontext() if output.quiet() else output.err_console.status(f"making a tiny Llama in {args.dir} ...")
    with spinner:
        out = make_model(args.dir, ModelSpec(seed=args.seed), force=args.force)
    seconds = round(time.monotonic() - t, 1)
    return done(args, {"wrote": str(out), "seed": args.seed, "seconds": seconds},
                [f"wrote {out} in {seconds:.1f} s (seed {args.seed})", f"serve it with  vllm.model_path: {out}"])
