"""The Prometheus rules and config rendered from a fleet pass `promtool`; so does every dashboard expression."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.observe import grafana
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet

pytestmark = pytest.mark.skipif(not shutil.which("promtool"),
                                reason="promtool not installed (Debian prometheus; `make test` installs it)")


def promtool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def test_rules_pass_promtool_and_expect_n_minus_1_peers(tmp_path):
    fleet = parse_fleet(local_fleet(3))
    path = tmp_path / "rules.yml"
    path.write_text(prom.render_rules(fleet))
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    rules = {r.get("alert") or r.get("record"): r for g in yaml.safe_load(path.read_text())["groups"]
             for r in g["rules"]}
    assert rules["P2PPeerCountBelowExpected"]["expr"].rstrip().endswith("< 2")
    for name in ("P2PLoadFailures", "P2PLookupTimeouts", "L1OutOfMemory", "EngineDown"):
        assert name in rules


def test_a_broken_rule_fails_promtool(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text("groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: sum(rate(x[1m]) >\n")
    assert promtool("check", "rules", str(path)).returncode != 0


def test_rendered_config_loads_the_rules(tmp_path):
    class Ctx:
        fleet = parse_fleet(local_fleet(2))

    rules = tmp_path / "rules.yml"
    rules.write_text(prom.render_rules(Ctx.fleet))
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(prom.render_config(Ctx, rules_file=str(rules)))
    res = promtool("check", "config", str(cfg))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 1 rule files found" in res.stdout + res.stderr


def test_every_dashboard_expression_is_valid_promql(tmp_path):
    path = tmp_path / "dash.yml"
    rules = [{"record": f"dash:panel_{i}", "expr": e} for i, e in enumerate(p.expr for p in grafana.panels())]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = promtool("check", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    board = grafana.dashboard("f")
    assert [p["targets"][0]["expr"] for p in board["panels"]] == [p.expr for p in grafana.panels()]
