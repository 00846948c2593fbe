"""Extra flags (settings.server_extra_args, vllm.args, router.args) are read the way each program's own parser reads
them: no spelling of a flag the spec owns (a bind address, a port, a must-agree setting, the connector) gets past
`validate` (issue 31, item 2)."""

from __future__ import annotations

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet


def _fleet(where: str, args: list[str]) -> dict:
    data = local_fleet(2, name="v", runtime="vllm", cpu_count=2) if where == "vllm.args" else local_fleet(2)
    if where == "settings.server_extra_args":
        data["settings"]["server_extra_args"] = args
    elif where == "nodes[1].instances[0].settings.server_extra_args":
        data["nodes"][1]["instances"][0]["settings"] = {"server_extra_args": args}
    elif where == "vllm.args":
        data["vllm"]["args"] = args
    else:
        data["router"] = {"enabled": True, "args": args}
    return data


REFUSED = [
    # Each of these passed `validate` before (issue 31): argparse reads an unambiguous prefix as the whole flag.
    ("settings.server_extra_args", ["--hos", "0.0.0.0"], "--host", "nodes[].bind"),
    ("settings.server_extra_args", ["--http-hos", "0.0.0.0"], "--http-host", "nodes[].bind"),
    ("settings.server_extra_args", ["--p2p-listen", "0.0.0.0:1"], "--p2p-listen-url", "instances[].ports.p2p"),
    ("settings.server_extra_args", ["--p2p-listen=0.0.0.0:1"], "--p2p-listen-url", "nodes[].bind"),
    ("nodes[1].instances[0].settings.server_extra_args", ["--chunk-siz", "512"], "--chunk-size",
     "settings.chunk_size"),
    ("settings.server_extra_args", ["--prometheus-port", "9090"], "--prometheus-port", "every interface"),
    # vLLM turns `_` into `-` and reads `--flag.key v` as one key of --flag's JSON.
    ("vllm.args", ["--kv_transfer_config", "{}"], "--kv-transfer-config", "lmcache server"),
    ("vllm.args", ["--served_model_name", "x"], "--served-model-name", "model"),
    ("vllm.args", ["--kv-transfer-config.kv_connector", "X"], "--kv-transfer-config", "lmcache server"),
    ("vllm.args", ["--hos", "0.0.0.0"], "--host", "nodes[].bind"),
    ("vllm.args", ["--block_size=16"], "--block-size", "vllm.block_size"),
    ("vllm.args", ["--config", "more.yaml"], "--config", "vllm.args"),
    # router.args was not checked at all.
    ("router.args", ["--host", "0.0.0.0"], "--host", "router.node"),
    ("router.args", ["--prometheus-host=0.0.0.0"], "--prometheus-host", "router.node"),
    ("router.args", ["--port", "1"], "--port", "router.port"),
]


@pytest.mark.parametrize("where,args,flag,owner", REFUSED, ids=[f"{w}:{a[0]}" for w, a, _, _ in REFUSED])
def test_every_spelling_of_an_owned_flag_is_refused_naming_its_field(where, args, flag, owner):
    with pytest.raises(BadInput) as exc:
        parse_fleet(_fleet(where, args))
    msg = str(exc.value)
    assert msg.startswith(where.replace("nodes[1].instances[0].", "nodes[1].instances[0].") + ":"), msg
    assert repr(args[0]) in msg and flag in msg and owner in msg and "\n" not in msg, msg


ACCEPTED = [
    ("settings.server_extra_args", ["--otlp-endpoint", "http://127.0.0.1:4317", "--enable-tracing"]),
    ("settings.server_extra_args", ["--eviction-trigger-watermark", "0.1", "--enable", "x"]),
    ("nodes[1].instances[0].settings.server_extra_args", ["--trace-level=storage"]),
    ("vllm.args", ["--max-num-seqs", "8", "--max_num_batched_tokens=512", "--dtype", "float32", "-tp", "1"]),
    ("vllm.args", ["--compilation-config.level", "0"]),
    # vllm-router (clap) takes no abbreviation: an unknown `--hos` fails there, it never binds anything.
    ("router.args", ["--request-timeout-secs", "5", "--hos", "x"]),
]


@pytest.mark.parametrize("where,args", ACCEPTED, ids=[f"{w}:{a[0]}" for w, a in ACCEPTED])
def test_flags_the_spec_does_not_own_pass(where, args):
    parse_fleet(_fleet(where, args))


# Issue 28: LMCache refuses P2P with a GDS or Device-DAX L1 at start; validate let such extra args through.
@pytest.mark.parametrize("where,args,flag", [
    ("settings.server_extra_args", ["--gds-l1-path", "/mnt/nvme"], "--gds-l1-path"),
    ("settings.server_extra_args", ["--gds-l1=/mnt/nvme"], "--gds-l1-path"),
    ("nodes[1].instances[0].settings.server_extra_args", ["--l1-devdax", "/dev/dax0.0"], "--l1-devdax-path"),
])
def test_p2p_with_a_gds_or_devdax_l1_is_refused_naming_the_flag(where, args, flag):
    with pytest.raises(BadInput) as exc:
        parse_fleet(_fleet(where, args))
    msg = str(exc.value)
    assert msg.startswith(where) and flag in msg and "settings.p2p: false" in msg and "\n" not in msg


def test_a_gds_l1_without_p2p_passes():
    data = _fleet("settings.server_extra_args", ["--gds-l1-path", "/mnt/nvme"])
    data["settings"]["p2p"] = False
    parse_fleet(data)
