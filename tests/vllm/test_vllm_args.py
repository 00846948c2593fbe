"""The vLLM command lines we render are accepted by vLLM's own argument parser (the one its API server uses),
and the model `make-model` writes is one vLLM's tokenizer loader reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from p2p_ops.lifecycle.render import fleet_runs
from p2p_ops.spec.layout import RunLayout
from tests.unit.test_render import golden_fleet
from tests.vllm.conftest import VLLM_PYTHON

pytestmark = pytest.mark.vllm

# Parse as vllm.entrypoints.openai.api_server does, validate, and report what vLLM understood.
PARSE = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))
validate_parsed_serve_args(args)
kv = args.kv_transfer_config
print(json.dumps({"model": args.model, "served": args.served_model_name, "host": args.host, "port": args.port,
                  "details": args.enable_prompt_tokens_details, "gpu_util": args.gpu_memory_utilization,
                  "max_num_seqs": args.max_num_seqs, "gen_config": args.override_generation_config,
                  "connector": kv.kv_connector, "extra": kv.kv_connector_extra_config}))
"""


def vllm_parse(argv: list[str]) -> dict:
    res = subprocess.run([str(VLLM_PYTHON), "-c", PARSE, json.dumps(argv)], capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1",
                                           "LMCACHE_TRACK_USAGE": "false", "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("inst,port", [("node-a-0", 8001), ("node-b-0", 8002)])
def test_golden_gpu_command_lines_parse_with_vllms_own_parser(inst, port):
    argv = list(fleet_runs(golden_fleet("vllm"), lambda n: RunLayout(Path("/srv")))[inst].command("engine"))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    got = vllm_parse(argv[3:])
    assert got["model"] == "Qwen/Qwen3-8B" and got["served"] == ["Qwen/Qwen3-8B"]
    assert got["host"] == "127.0.0.1" and got["port"] == port
    assert got["details"] is True and got["gpu_util"] == 0.8 and got["max_num_seqs"] == 8
    assert got["gen_config"] == {"stop": ["*.md", "end of text"]}
    assert got["connector"] == "LMCacheMPConnector"
    assert got["extra"] == {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 5600 + port - 8000}


def test_made_model_loads_with_vllms_transformers(tiny_model):
    code = ("import sys; from transformers import AutoConfig, AutoTokenizer; p = sys.argv[1]; "
            "c = AutoConfig.from_pretrained(p); t = AutoTokenizer.from_pretrained(p); "
            "ids = t('cache prefix node')['input_ids']; "
            "print(c.model_type, c.num_hidden_layers, ids[0] == t.bos_token_id, t.decode(ids[1:]))")
    res = subprocess.run([str(VLLM_PYTHON), "-c", code, str(tiny_model)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split(maxsplit=3) == ["llama", "2", "True", "cache prefix node\n"]
