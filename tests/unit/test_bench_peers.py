"""`p2pctl bench peers`'s pure parts: who holds and who serves a prefix, the per-request verdict, the rows and
the lookup target, the table and plot from a captured run, and the verb's refusals."""

import json
from pathlib import Path

import pytest

from p2p_ops.bench import peers
from p2p_ops.bench.peers import PeersOptions, plan
from p2p_ops.errors import BadInput
from p2p_ops.observe import peers_plot

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "peers" / "n3_one_repeat.json"


def test_holders_are_the_instances_with_every_needed_chunk():
    per_chunk = [["b-0", "c-0"], ["c-0", "b-0"], ["c-0"]]
    assert peers.holders(per_chunk, 2) == ["b-0", "c-0"]
    assert peers.holders(per_chunk, 3) == ["c-0"]
    assert peers.holders(per_chunk[:1], 2) == [] and peers.holders([], 1) == []


def test_the_serving_peer_is_the_first_holder_in_the_requesters_adapter_order():
    assert peers.serving_peer(["b-0", "d-0"], ["d-0", "c-0", "b-0"]) == "d-0"
    assert peers.serving_peer(["b-0"], ["d-0", "c-0", "b-0"]) == "b-0"
    assert peers.serving_peer(["x-0"], ["d-0"]) == "" and peers.serving_peer([], ["d-0"]) == ""


def sample(scenario=peers.ONE_HOLDER, **kw) -> peers.Sample:
    base = dict(nodes=4, requester="a-0", holders=["c-0"], served_by="c-0", cached_tokens=512, need=512,
                load_tasks=1.0, lookup_ms=8.0, retrieve_ms=2.0)
    return peers.Sample(scenario, **{**base, **kw})


@pytest.mark.parametrize("s,ok,words", [
    (sample(), True, ""),
    (sample(load_tasks=2.0), False, "2 P2P load task(s)"),
    (sample(cached_tokens=256), False, "256/512 tokens cached"),
    (sample(served_by=""), False, "want all, from one peer)"),
    (sample(peers.NO_HOLDER, holders=[], served_by="", cached_tokens=0, load_tasks=0), True, ""),
    (sample(peers.NO_HOLDER, holders=[], served_by="", cached_tokens=256, load_tasks=1), False, "nobody holds"),
    (sample(error="could not compute the prefix cold on c-0"), False, "could not compute"),
])
def test_a_request_passes_only_when_served_whole_by_one_peer_or_cleanly_missed(s, ok, words):
    got = peers.check_sample(s)
    assert got.ok is ok and words in got.error


def fleet_samples(n: int, miss_ms: float) -> list[peers.Sample]:
    out = []
    for ms in (miss_ms, miss_ms + 1, miss_ms + 4):
        out.append(peers.check_sample(sample(peers.NO_HOLDER, nodes=n, holders=[], served_by="", cached_tokens=0,
                                      load_tasks=0, lookup_ms=ms, retrieve_ms=None)))
        out.append(peers.check_sample(sample(nodes=n, where="first", lookup_ms=ms * 2)))
    return out


def test_rows_group_by_size_and_scenario_with_percentiles_and_pull():
    rows = peers.rows(fleet_samples(2, 3.0) + fleet_samples(8, 9.0))
    assert [(r["nodes"], r["scenario"]) for r in rows] == [(2, "no holder"), (2, "one holder"),
                                                            (8, "no holder"), (8, "one holder")]
    hit8 = rows[3]
    assert hit8["lookup_ms_p50"] == 20.0 and hit8["lookup_ms_p99"] == pytest.approx(25.88) and hit8["pull_ms_p50"] == 22.0
    assert hit8["serving_peer"] == "c-0" and hit8["passed"] == 3 and rows[2]["pull_ms_p50"] is None


@pytest.mark.parametrize("samples,reached,words", [
    (fleet_samples(2, 3.0) + fleet_samples(8, 9.0), True, "10.0 ms p50 (p99 12.9 ms) for a miss at N=8: reached"),
    (fleet_samples(8, 12.0), False, "NOT reached"),
    (fleet_samples(4, 3.0), None, "not measured at 8"),
    ([], None, "not measured (no miss lookup"),
])
def test_the_target_is_judged_on_the_miss_lookup_of_the_largest_fleet(samples, reached, words):
    t = peers.target(peers.rows(samples))
    assert t["reached"] is reached and words in t["line"]


def test_plan_covers_first_last_two_holders_and_none():
    assert [(s, w) for s, w, _ in plan(["c-0", "b-0", "d-0"])] == [
        ("no holder", ""), ("one holder", "first"), ("one holder", "last"), ("two holders", "first and last")]
    assert plan(["c-0", "b-0", "d-0"])[3][2] == ["c-0", "d-0"]
    assert [s for s, _, _ in plan(["b-0"])] == ["no holder", "one holder"]


def test_options_refuse_a_fleet_without_peers_and_no_repeats():
    with pytest.raises(BadInput, match="--nodes 1,4"):
        PeersOptions(sizes=(1, 4)).validate()
    with pytest.raises(BadInput, match="--repeats 0"):
        PeersOptions(repeats=0).validate()


def test_captured_run_renders_as_table_target_and_plot(tmp_path):
    doc = json.loads(CAPTURED.read_text())
    text = peers_plot.markdown(doc)
    assert "| 3 | two holders (first and last in lookup order) | node-c-0 | 512 / 512 | 1 |" in text
    assert "P2P lookup at 8 peers: 10 ms or less" in text and "not measured at 8" in text
    assert peers_plot.lookup_plot(tmp_path / "l.png", doc["rows"]) == "l.png"
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
    assert set(peers_plot.series(doc["rows"])) == {peers_plot.scenario_text(r) for r in doc["rows"]}


def test_the_cli_table_has_one_line_per_row():
    from p2p_ops.cli.bench_cmds import peers_table

    doc = json.loads(CAPTURED.read_text())
    lines = peers_table(doc).splitlines()
    assert lines[0].startswith("N  scenario") and len(lines) == 1 + len(doc["rows"])


@pytest.fixture
def spec(tmp_path, p2pctl):
    # An offset nobody's fleet uses on a shared box: "not running" must hold.
    code, _, err = p2pctl("init", "--local", "2", "-o", str(tmp_path / "f.yaml"), "--memory-budget", "20",
                          "--port-offset", "41000")
    assert code == 0, err
    return tmp_path / "f.yaml"


@pytest.mark.parametrize("argv,words", [
    (["--nodes", "two"], "--nodes 'two'"),
    (["--nodes", "1"], "at least 2 servers"),
    (["--running", "--port-offset", "1000"], "--port-offset"),
    (["--running", "--json"], "p2pctl up"),
])
def test_bench_peers_refuses_bad_input_in_one_line(spec, p2pctl, argv, words):
    code, out, err = p2pctl("bench", "peers", "-f", str(spec), *argv)
    assert code == 2 and words in err and "Traceback" not in err
    assert json.loads(out)["exit_code"] == 2 if "--json" in argv else out == ""
    assert not list(spec.parent.rglob("*-peers"))  # refused before any run folder


def test_a_missed_target_names_the_fan_out_and_the_cpus_the_fleet_shared():
    rows = peers.rows(fleet_samples(2, 3.0) + fleet_samples(8, 40.0))
    goal = peers.target(rows)
    why = peers.why_missed(goal, rows, [{"nodes": 8, "cpus": 2, "loadavg_start": [9.5, 8.0, 7.0]}])
    assert "asks its 7 peers one after another" in why and "4.0 ms at N=2" in why
    assert "8 lmcache servers" in why and "shared 2 CPUs at load average 9.5 8.0 7.0" in why
    assert peers.why_missed(peers.target(peers.rows(fleet_samples(8, 3.0))), rows, []) == ""
