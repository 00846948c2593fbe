"""`calibrate`, `bench placement` and the demo before they start anything: a fleet that is not running, a
--port-offset whose port is taken, and what a calibration document reads as."""

from __future__ import annotations

import json
import socket

import pytest

from p2p_ops.bench import calibrate
from p2p_ops.lifecycle import free_ports
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet


def test_calibrate_on_a_fleet_that_is_not_up_says_so_first_naming_p2pctl_up(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="notup")
    code, out, err = p2pctl("calibrate", "-f", str(fleet), "--quick", "--json")
    assert code == 2
    assert "is not running" in err and "p2pctl up -f" in err and len(err.strip().splitlines()) == 1, err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "--launch" in doc["error"]
    assert not (tmp_path / "p2p-run" / "notup" / "tests").exists()  # no run folder for a run that never ran


def test_port_offset_without_launch_is_refused(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="po")
    code, _, err = p2pctl("calibrate", "-f", str(fleet), "--port-offset", "1000")
    assert code == 2 and "--port-offset: only with --launch" in err


def _taken(choice: free_ports.PortChoice, kind: str) -> socket.socket:
    s = socket.socket()
    # as the servers and port_free do: a port some earlier fleet left in TIME_WAIT is free
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", choice.base[kind]))
    s.listen()
    return s


def test_placement_refuses_a_port_offset_whose_port_is_taken_before_starting_anything(tmp_path, p2pctl):
    choice = free_ports.choose(2, router=True)
    with _taken(choice, "router"):
        code, out, err = p2pctl("bench", "placement", "--quick", "--port-offset", str(choice.offset),
                                "--out", str(tmp_path / "run"), "--json")
    assert code == 2 and f"port {choice.base['router']} is in use" in err, err
    assert json.loads(out)["ok"] is False
    assert not (tmp_path / "run").exists()


def test_demo_refuses_a_port_offset_whose_port_is_taken(capsys):
    from p2p_ops.cli import demo

    choice = free_ports.choose(2)
    with _taken(choice, "coordinator"):
        assert demo.main(["--port-offset", str(choice.offset)]) == 2
    err = capsys.readouterr().err
    assert f"port {choice.base['coordinator']} is in use" in err and len(err.strip().splitlines()) == 1


def test_lengths_over_the_context_are_skipped_and_recorded(tmp_path):
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 2, name="ctx")) as ctx:
        limit = calibrate.prompt_limit(ctx)
        doc = calibrate.run(ctx, tmp_path / "out", [limit + 1], repeats=1, seed=1, doc_tokens=None)
    assert doc["skipped"] == [limit + 1] and doc["rows"] == [] and doc["advice"]["min_pull_tokens"] is None
    assert json.loads((tmp_path / "out" / "crossover.json").read_text()) == doc
    assert "Skipped" in (tmp_path / "out" / "summary.md").read_text()


def test_a_launched_calibration_summary_shows_the_fleet_timings_ports_and_cold_ttft():
    doc = {"fleet": "calibrate", "runtime": "embedded", "repeats": 2, "skipped": [], "failures": [],
           "rows": [{"tokens": 512, "ttft_cold_a_s": 0.3, "ttft_pulled_b_s": 0.1, "ttft_recompute_b_s": 0.2,
                     "cached_tokens_b": 512, "speedup": 2.0}],
           "advice": {"min_pull_tokens": 512, "doc_tokens": 512, "cache_threshold": 1.0},
           "launched": {"ports": {"how": "free", "offset": 1000, "base": {}}, "timings_s": {"up_s": 4.0, "wait_s": 2.5}}}
    md = calibrate.summary(doc)
    assert "up 4.0 s, ready 2.5 s later; ports free (default plan + 1000)" in md
    assert "| 512 | 300 | 100 | 200 | 2.00x | 512 |" in md and "pull prefixes of 512 tokens" in md


def test_placement_refuses_two_timing_choices_in_one_line_before_starting_anything(p2pctl):
    code, out, err = p2pctl("bench", "placement", "--quick", "--no-gpu-timing", "--timing", "h200-tcp")
    assert code == 2 and out == ""
    assert "--no-gpu-timing with --timing h200-tcp" in err and len(err.strip().splitlines()) == 1


def test_an_unknown_timing_profile_is_refused_naming_the_choices(capsys):
    from p2p_ops.cli import main

    with pytest.raises(SystemExit) as exc:  # argparse's usage error
        main(["calibrate", "--launch", "--timing", "a100"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --timing: invalid choice: 'a100'" in err and "h200-rdma" in err


def test_a_kv_profile_without_launch_is_refused_naming_where_a_running_fleet_keeps_it(tmp_path, p2pctl):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="prof")
    code, out, err = p2pctl("calibrate", "-f", str(fleet), "--profile", "gpt-oss-120b")
    assert code == 2 and out == "" and "engine.profile" in err and len(err.strip().splitlines()) == 1



def test_demo_profile_sizes_the_embedded_fleet_and_is_refused_for_vllm(capsys):
    from p2p_ops.cli import demo
    from p2p_ops.lifecycle.free_ports import choose

    data = demo.embedded_fleet(choose(2, None).base, "llama-3-8b")
    assert data["name"] == "demo-llama-3-8b" and data["engine"]["profile"] == "llama-3-8b"
    assert data["settings"]["shm_transport"] is True
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--runtime", "vllm", "--profile", "llama-3-8b"])
    assert exit_.value.code == 2 and "--profile is for the embedded runtime" in capsys.readouterr().err


def _setup(root, *have):
    """A checkout and venv under `root` holding only `have` (paths relative to root)."""
    for rel in have:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return {"checkout": root / "checkout", "bin_dir": root / "venv" / "bin"}


VENV = ("venv/bin/lmcache", "venv/bin/p2p-engine")
ROUTER = "checkout/.venv-router/bin/vllm-router"


@pytest.mark.parametrize("have, generator, refusal", [
    ((), "ours", "venv/bin/lmcache; run `make setup` first"),
    (VENV[:1], "ours", "venv/bin/p2p-engine; run `make setup` first"),
    (VENV, "ours", ".venv-router/bin/vllm-router; run `make setup-router` first"),
    ((*VENV, ROUTER), "ours", ""),
    ((*VENV, ROUTER), "inference-perf", "inference-perf/bin/inference-perf; run `make setup-inference-perf` first"),
    ((*VENV, ROUTER, "inference-perf/bin/inference-perf"), "inference-perf", ""),
])
def test_placement_names_the_make_target_of_the_first_thing_its_arms_lack(tmp_path, have, generator, refusal):
    from p2p_ops.bench import placement, placement_verdict

    opts = placement_verdict.PlacementOptions(generator=generator, inference_perf_venv=str(tmp_path / "inference-perf"))
    why = placement.missing_setup(opts, **_setup(tmp_path, *have))
    assert (refusal in why and why.startswith("bench placement: no ")) if refusal else why == ""


def test_placement_without_the_router_refuses_in_one_line_before_starting_anything(tmp_path, p2pctl, monkeypatch):
    from functools import partial

    from p2p_ops.bench import placement

    monkeypatch.setattr(placement, "missing_setup", partial(placement.missing_setup, **_setup(tmp_path, *VENV)))
    monkeypatch.setattr(placement.launch, "temporary", lambda *a, **k: pytest.fail("a fleet was started"))
    code, out, err = p2pctl("bench", "placement", "--quick", "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "run `make setup-router` first (nothing was started)" in err
    assert not (tmp_path / "run").exists()
