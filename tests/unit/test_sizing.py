"""`init --local N [--profile P]`: L1 and engine KV per node sized for the box, and a plain refusal when the
fleet cannot fit."""

import json
import subprocess
import sys

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.facts.base import RecordedRunner
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.sizing import COORDINATOR_GIB, ENGINE_BASE_GIB, SERVER_BASE_GIB, box_budget_gib, size_nodes
from p2p_ops.spec.starter import local_fleet
from p2p_runtime.profiles import PROFILES, resolve

TINY = resolve("tiny", 2, 4, 32)
LLAMA = PROFILES["llama-3-8b"]


def test_without_a_budget_the_tiny_fleet_keeps_todays_defaults():
    data = local_fleet(2)
    assert data["settings"]["l1_size_gb"] == 1 and data["engine"]["num_blocks"] == 2048
    assert data["engine"]["profile"] == "tiny" and data["engine"]["max_model_len"] == 8192
    assert not data["settings"]["shm_transport"]


def test_a_real_profile_sets_chunk_block_page_and_timeout_sizes():
    data = local_fleet(4, profile="llama-3-8b", memory_budget_gib=100)
    s, e = data["settings"], data["engine"]
    assert (s["chunk_size"], s["l1_align_bytes"], e["block_size"]) == (256, 65536, 16)
    # Generous: one 8192-token context of engine KV (1 GiB), L1 twice that.
    assert e["num_blocks"] * 16 * 128 * 1024 == 1 << 30 and s["l1_size_gb"] == 2
    assert e["lmcache_timeout"] > 2 and s["shm_transport"]  # pickled real-size KV is too slow (starter.py)
    fleet = parse_fleet(data)
    assert fleet.engine.config().kv_bytes == 1 << 30


@pytest.mark.parametrize("n,budget", [(2, 6.0), (4, 9.0), (8, 14.0)])
def test_the_chosen_size_fits_the_budget_and_shrinks_with_more_nodes(n, budget):
    size = size_nodes(n, LLAMA, budget)
    assert size.fleet_gib(n) <= budget
    bigger = size_nodes(max(1, n // 2), LLAMA, budget)
    assert bigger.per_node_gib() >= size.per_node_gib()


def test_eight_tiny_nodes_get_a_small_l1():
    size = size_nodes(8, TINY, 12.0)
    assert size.l1_size_gb < 1 and size.num_blocks == 2048
    assert size.fleet_gib(8) == pytest.approx(COORDINATOR_GIB + 8 * (SERVER_BASE_GIB + size.l1_size_gb +
                                                                       ENGINE_BASE_GIB + size.kv_gib))


def test_a_fleet_that_cannot_fit_is_refused_naming_what_would():
    with pytest.raises(BadInput) as err:
        size_nodes(8, PROFILES["qwen3-32b"], 8.0)
    text = str(err.value)
    assert "will not fit memory" in text and "budget is 8.0 GiB" in text
    fits = int(text.split("use --local ")[1].split()[0])
    assert size_nodes(fits, PROFILES["qwen3-32b"], 8.0).fleet_gib(fits) <= 8.0
    with pytest.raises(BadInput):
        size_nodes(fits + 1, PROFILES["qwen3-32b"], 8.0)


def test_l1_always_holds_a_few_chunks_of_the_profile():
    size = size_nodes(4, PROFILES["qwen3-32b"], 9.0)
    assert size.l1_size_gb * 2**30 >= 8 * PROFILES["qwen3-32b"].chunk_bytes


def test_default_budget_reads_memavailable(tmp_path):
    (tmp_path / "meminfo.txt").write_text("MemTotal: 24000000 kB\nMemAvailable: 16777216 kB\n")
    runner = RecordedRunner(tmp_path, {("cat", "/proc/meminfo"): "meminfo"})
    assert box_budget_gib(runner) == pytest.approx(16 * 0.75)
    assert box_budget_gib(RecordedRunner(tmp_path, {})) is None
    assert size_nodes(2, TINY, None).l1_size_gb == 1  # no budget: the most generous step


def _init(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "p2p_ops.cli", "init", "-o", str(tmp_path / "f.yaml"), *args],
                          capture_output=True, text=True, timeout=120)


def test_init_profile_writes_a_fleet_that_loads_and_says_how_it_was_sized(tmp_path):
    res = _init(tmp_path, "--local", "4", "--profile", "llama-3-8b", "--memory-budget", "9", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["profile"] == "llama-3-8b" and "budget of 9.0 GiB" in doc["sizing"]
    text = (tmp_path / "f.yaml").read_text()
    assert "profile: llama-3-8b" in text


def test_init_that_will_not_fit_exits_2_with_one_line(tmp_path):
    res = _init(tmp_path, "--local", "8", "--profile", "qwen3-32b", "--memory-budget", "4")
    assert res.returncode == 2 and "will not fit memory" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "f.yaml").exists()
