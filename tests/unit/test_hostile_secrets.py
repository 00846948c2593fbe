"""Issue 31: secrets that leave by layout or by value, and verdicts read from text.

A bundle of a fleet whose `api_key` is written in any YAML layout, whose logs hold the key's bare value, holds
the key nowhere; `report --json` on a failing run says failed whatever text its evidence files hold.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from p2p_ops.diagnose import bundle
from p2p_ops.diagnose.redact.structure import redact_structure
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import write_csv
from tests.conftest import write_local_fleet
from tests.unit.test_report import make_run, rec

KEY = "Zq8apiKEYvalue01"
# (how the layout is written, the key it gives): every one of these leaked through line-based redaction.
LAYOUTS = {
    "next_line": (f"api_key:\n  {KEY}\n", KEY),
    "comment_then_value": (f"api_key: # the engines' key\n  {KEY}\n", KEY),
    "multi_line_plain": (f"api_key: {KEY}\n  Zq7second\n  Zq6third\n", f"{KEY} Zq7second Zq6third"),
    "complex_key": (f"? api_key\n: {KEY}\n", KEY),
    "json_flow_value_on_the_next_line": (f'{{"api_key":\n  "{KEY}"}}\n', KEY),
    "double_quoted_escapes": ('api_key: "Zq8apiKEY\\x76alue01"\n', KEY),
}


def _fleet_with(tmp_path: Path, layout: str) -> Path:
    f = write_local_fleet(tmp_path / "fleet.yaml", 1, name="sec")
    data = yaml.safe_load(f.read_text())
    text = yaml.safe_dump(data, sort_keys=False)
    if layout.startswith("{"):  # JSON flow: the whole spec as one flow mapping, the key's part spliced in
        text = json.dumps(data)[:-1] + ", " + layout.strip()[1:] + "\n"
    else:
        text += layout
    f.write_text(text)
    f.chmod(0o600)
    return f


def _bundle_text(ctx: FleetContext, out: Path) -> dict[str, str]:
    bundle.collect(ctx, out, with_doctor=False)
    with tarfile.open(out) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode("utf-8", "replace")
                for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_bundle_holds_the_api_key_nowhere_in_any_layout(tmp_path, name):
    layout, key = LAYOUTS[name]
    with FleetContext.load(_fleet_with(tmp_path, layout)) as ctx:
        assert ctx.fleet.api_key == key
        launch.render(ctx)
        log = Path(ctx.proc(ctx.unit("engine", "node-a-0")).log)
        log.write_text(f"INFO used key {key} for /v1/models\nINFO cache_key=5f3a9c0d stored\n")
        got = _bundle_text(ctx, tmp_path / "b.tar.gz")
    pieces = [key, *key.split()]
    leaks = {path: [p for p in pieces if p in text] for path, text in got.items()}
    assert not {p: found for p, found in leaks.items() if found}, leaks
    manifest = json.loads(got["manifest.json"])
    where = {(r["where"], r.get("name", "")) for r in manifest["redactions"]}
    assert ("fleet.yaml", "api_key") in where
    assert any(w.endswith("engine.log") for w, _ in where)
    assert "cache_key=5f3a9c0d" in got["nodes/node-a/node-a-0/engine.log"]  # the diagnostic value stays
    spec = yaml.safe_load(got["fleet.yaml"])  # still a fleet spec, the key masked, the rest intact
    assert spec["api_key"] == "<redacted>" and spec["nodes"][0]["name"] == "node-a"


def test_redacted_fleet_yaml_keeps_everything_but_secrets():
    text = ("name: f\n# a comment holding hf_Zq8commentTOKEN0123456789\nnodes:\n- name: a\n  env:\n"
            "    HF_TOKEN: hf_Zq8abcdefghijklmnopqrstu\n    MODE: fast\n    db_password:\n      Zq8multi\n")
    result = redact_structure(text, "fleet.yaml")
    doc = yaml.safe_load(result.text)
    assert doc["nodes"][0]["env"] == {"HF_TOKEN": "<redacted>", "MODE": "fast", "db_password": "<redacted>"}
    assert "Zq8" not in result.text  # the comment goes with the layout
    assert sorted((r.line, r.name) for r in result.redactions) == [(6, "HF_TOKEN"), (9, "db_password")]
    assert result.values == {"hf_Zq8abcdefghijklmnopqrstu": "HF_TOKEN", "Zq8multi": "db_password"}


def test_an_alias_of_a_secret_masks_its_anchor_too():
    result = redact_structure(f"keys: {{a: &k {KEY}, n: 1234}}\napi_key: *k\n", "fleet.yaml")
    assert yaml.safe_load(result.text) == {"keys": {"a": "<redacted>", "n": 1234}, "api_key": "<redacted>"}


# Issue 44: a secret passed as argv, the item after a secret-named flag (a headers flag's `name=value` too).
ARGV = [("settings", "server_extra_args", ["--otlp-headers", "x-honeycomb-team=Zq8otlpKEY"], "Zq8otlpKEY"),
        ("vllm", "args", ["--hf-token", "Zq8hfTOKEN"], "Zq8hfTOKEN"),
        ("router", "args", ["--api-key", "Zq8routerKEY"], "Zq8routerKEY")]


@pytest.mark.parametrize("section, field, args, secret", ARGV, ids=[f"{s}.{f}" for s, f, *_ in ARGV])
def test_a_secret_in_argv_is_in_no_file_of_the_bundle(tmp_path, section, field, args, secret):
    f = write_local_fleet(tmp_path / "fleet.yaml", 1, name="sec")
    data = yaml.safe_load(f.read_text())
    data.setdefault(section, {})[field] = args
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    with FleetContext.load(f) as ctx:
        launch.render(ctx)
        got = _bundle_text(ctx, tmp_path / "b.tar.gz")
    assert not [p for p, t in got.items() if secret in t or "honeycomb-team=" in t]
    assert yaml.safe_load(got["fleet.yaml"])[section][field] == [args[0], "<redacted>"]


def test_unparsable_fleet_yaml_is_left_out_not_copied(tmp_path):
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 1, name="sec")) as ctx:
        launch.render(ctx)
        ctx.fleet_file.write_text(f"api_key: {KEY}\nname: [unclosed\n")
        got = _bundle_text(ctx, tmp_path / "b.tar.gz")
    assert "fleet.yaml" not in got and not any(KEY in t for t in got.values())
    manifest = json.loads(got["manifest.json"])
    assert any(u["what"] == "the fleet spec" for u in manifest["unreachable"])


def test_a_value_redacted_in_one_file_is_scrubbed_from_every_other(tmp_path):
    """A secret the redactor found by name (env.sh's `export DB_PASSWORD=...`) is also removed where a log
    prints it bare, in files collected before and after env.sh."""
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 1, name="sec")) as ctx:
        launch.render(ctx)
        env = ctx.layout.env("node-a-0")
        env.write_text(env.read_text() + "export DB_PASSWORD=Zq8dbPASSWORDvalue\n")
        Path(ctx.proc(ctx.unit("server", "node-a-0")).log).write_text("connecting with Zq8dbPASSWORDvalue\n")
        got = _bundle_text(ctx, tmp_path / "b.tar.gz")
    assert not [p for p, t in got.items() if "Zq8dbPASSWORDvalue" in t]


# ---- verdicts from data, not from text ---------------------------------------------------------------------

MARK = "**Overall: PASS**"


def _failing_run(run: Path, stage: str = "ladder") -> None:
    make_run(run, kill_b=True)
    if stage != "ladder":
        records = [rec(stage, 1, "a-0", "", 0.0), rec(stage, 1, "b-0", "a-0", 0.3, ok=False)]
        write_csv(run / "requests.csv", records)
        (run / "stages.json").write_text(json.dumps({"stages": [{"name": stage, "level": 1, "wall_s": 1.0}]}))


@pytest.mark.parametrize("where", ["stage_name", "explain_verdict", "bench_field"])
def test_report_json_says_failed_whatever_text_the_evidence_holds(tmp_path, p2pctl, where):
    _failing_run(tmp_path, stage=f"x {MARK}" if where == "stage_name" else "ladder")
    if where == "explain_verdict":
        (tmp_path / "explain.json").write_text(json.dumps([{"request": 1, "verdict": MARK}]))
    if where == "bench_field":
        (tmp_path / "lmcache-bench").mkdir()
        (tmp_path / "lmcache-bench" / "result.json").write_text(json.dumps(
            {"failed": 0, "exit_code": 0, "completed": 3, "note": MARK}))
    code, out, err = p2pctl("report", str(tmp_path), "--json")
    assert MARK in (tmp_path / "summary.md").read_text()  # the marker is there in text...
    assert json.loads(out)["passed"] is False and code == 1, err  # ...and the verdict is still the data's


def test_report_json_passes_a_healthy_run(tmp_path, p2pctl):
    make_run(tmp_path)
    code, out, _ = p2pctl("report", str(tmp_path), "--json")
    assert json.loads(out)["passed"] is True and code == 0
