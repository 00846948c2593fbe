"""The fuzz tier of issue 20: random file trees for bundle, rdma and report, random text for every parser, random
YAML for the spec. Each answers with success or one line and exit 2: never a traceback, a hang or a read outside
the folder it was given.

Bounded by count: hypothesis draws a fixed number of examples (derandomized, so a failure reproduces) and does
the work of every one, however busy the box (a wall-clock budget once let examples pass without doing it).
Every example that could block runs under an alarm, so a regression fails instead of stalling the suite.
`make test-hostile` (P2P_FUZZ_SCALE=8) draws eight times as many.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO

pytestmark = pytest.mark.fuzz
TREES = REPO / "tests" / "fixtures" / "diagnose" / "rdma"
SECRET = "FUZZ-SECRET-0123456789"
SCALE = float(os.environ.get("P2P_FUZZ_SCALE", "1"))
# No shrinking: on a busy box shrinking a failure took over five minutes; the failing example is printed as drawn.
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None,
                phases=[Phase.explicit, Phase.reuse, Phase.generate])


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


@contextmanager
def alarm(seconds: int):
    def hung(signum, frame):
        raise TimeoutError(f"hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line_or_ok(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err, err
    assert code in (0, 1, 2), (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    assert SECRET not in out + err


# ---- random text for every parser --------------------------------------------------------------------------

ODD = "\0\n\r\t\x0b\x0c\x1b\x85\u2028\u2029'\"\\$`(){}[]|&;<>#=:%@*?!~ -_./,+"
texts = st.one_of(st.text(max_size=400), st.text(alphabet=st.sampled_from(list(ODD) + list("aZ0x9k")), max_size=400),
                  st.binary(max_size=400).map(lambda b: b.decode("utf-8", "replace")))


def _parsers():
    from p2p_ops.diagnose.nixl.failures import classify
    from p2p_ops.diagnose.redact import redact_text
    from p2p_ops.errors import BadInput
    from p2p_ops.facts import COMMAND_FACTS
    from p2p_ops.facts.envfile import parse_environ, read_env_sh
    from p2p_ops.facts.logs import parse_excerpt, parse_file_copy
    from p2p_ops.facts.sections import parse_sections
    from p2p_ops.facts.sysfs_ib import parse_sysfs_ib_grep
    from p2p_ops.facts.ucx_log import parse_proto_tables
    from p2p_ops.facts.ucx_trace import parse_trace
    from p2p_ops.files import parse_json

    def proto(text: str) -> None:
        parse_proto_tables(text.split("\n"))

    def json_reader(text: str) -> None:
        try:
            parse_json(text, "t")
        except BadInput:
            pass

    return [parse_trace, json_reader, read_env_sh, lambda t: parse_environ(t, ("A", "B")), proto,
            parse_sections, parse_file_copy, parse_excerpt, parse_sysfs_ib_grep, classify, redact_text,
            *(f.parse for f in COMMAND_FACTS)]


PARSERS = _parsers()


@settings(FUZZ, max_examples=examples(300))
@given(text=texts, prefix=st.sampled_from(["", "[1.2] [h:1:t] f.c:1 UCX INFO ", "export A=", "machine h password ",
                                           "client_secret: |\n  ", "-----BEGIN PRIVATE KEY-----\n", "I0801 1:1:1.1 1 a.cc:1] ",
                                           "# lane[1]: 5:a.0 ", "[" * 3000, '{"a": ' * 3000]))
def test_every_parser_takes_any_text(text, prefix):
    with alarm(20):
        for parse in PARSERS:
            parse(prefix + text)


# ---- random YAML for the spec ------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**80, 2**80), st.floats(), st.text(max_size=30))
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                     max_leaves=20)
YAML_BITS = ["nodes:", "- ", "  ", "&a ", "*a", "<<: *a", "!!python/object:os.system", "{", "}", "[", "]", "'", '"',
             "\n", ": ", "1:20", "0x1f", "9" * 40, "\u2028", "\t", "? ", "--- ", "...", "name: x\n", "name: x\n"]


@settings(FUZZ, max_examples=examples(200))
@given(data=trees, edits=st.lists(st.tuples(st.integers(0, 400), st.sampled_from(YAML_BITS)), max_size=6))
def test_any_yaml_is_a_fleet_or_one_line_exit_2(tmp_path_factory, p2pctl, data, edits):
    from p2p_ops.spec.starter import local_fleet, starter_yaml

    text = starter_yaml(local_fleet(2)) if isinstance(data, bool) else yaml.safe_dump(data)
    for at, bit in edits:
        text = text[:at] + bit + text[at:]
    f = tmp_path_factory.mktemp("yaml") / "fleet.yaml"
    f.write_text(text)
    with alarm(30):
        one_line_or_ok(*p2pctl("validate", "-f", str(f)))


# ---- random file trees ---------------------------------------------------------------------------------------

KINDS = ["bytes", "link_out", "link_in", "hardlink_out", "hardlink_in", "fifo", "dir", "loop", "deep", "missing",
         "big"]


def plant(path: Path, kind: str, content: bytes, outside: Path) -> None:
    """Put a hostile thing of `kind` where `path` is (whatever was there goes)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if not path.parent.is_dir() or path.parent.is_symlink():
        if os.path.lexists(path.parent):
            return  # an earlier change replaced the folder itself
        try:
            path.parent.mkdir(parents=True)
        except (FileExistsError, NotADirectoryError):
            return  # ... or one above it
    if kind == "bytes":
        path.write_bytes(content)
    elif kind == "link_out":
        path.symlink_to(outside)
    elif kind == "link_in":
        (path.parent / (path.name + ".real")).write_bytes(content)
        path.symlink_to(path.name + ".real")
    elif kind == "hardlink_out":  # the same file as the secret: a hard link passes every check by name
        os.link(outside, path)
    elif kind == "hardlink_in":
        (path.parent / (path.name + ".real")).write_bytes(content)
        os.link(path.parent / (path.name + ".real"), path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "deep":
        deep = path
        for i in range(80):
            deep = deep / f"d{i}"
        deep.mkdir(parents=True)
    elif kind == "big":
        path.write_bytes(content * 2000)


def outside_file(root: Path) -> Path:
    secret = root / "outside-secret"
    if not secret.exists():
        secret.write_text(f"{SECRET}\n")
    return secret


RDMA_SPOTS = ["proc/modules", "proc/self/limits", "tools/ucx_info_d.txt", "tools/nvidia_smi_topo.txt",
              "sys/class/net/lo/mtu", "sys/class/infiniband", "sys/class/net", "dev/infiniband", "tools/ucx_info_d.rc"]


@settings(FUZZ, max_examples=examples(40))
@given(changes=st.lists(st.tuples(st.sampled_from(RDMA_SPOTS), st.sampled_from(KINDS), st.binary(max_size=200)),
                        min_size=1, max_size=4),
       case=st.sampled_from(["roce_healthy", "ib_healthy", "no_rdma"]))
def test_rdma_root_on_any_tree(tmp_path_factory, capsys, changes, case):
    from p2p_ops.cli import main

    base = tmp_path_factory.mktemp("rdma")
    root = base / "snap"
    shutil.copytree(TREES / case, root)
    for spot, kind, content in changes:
        plant(root / spot, kind, content, outside_file(base))
    with alarm(30):
        code = main(["rdma", "--root", str(root), "--json"])
    out, err = capsys.readouterr()
    one_line_or_ok(code, out, err)
    secret = os.stat(outside_file(base)).st_ino
    if any(os.lstat(os.path.join(d, n)).st_ino == secret for d, _, names in os.walk(root) for n in names):
        assert code == 2, out  # the outside file hard-linked in: the tree is refused (maybe first for another reason)
    if code in (0, 1):
        json.loads(out)


REPORT_FILES = ["requests.csv", "basic/result.json", "stages.json", "lmcache-bench/result.json",
                "status_before.json", "status_after.json"]
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.sampled_from(
                                                                ["checks", "numbers", "stages", "name", "ok",
                                                                 "detail", "level", "wall_s", "failed"]), inner,
                                                                max_size=4)), max_leaves=12)


def _record_csv(cells: list[str]) -> bytes:
    from p2p_ops.observe.records import FIELDS

    return (",".join(FIELDS) + "\n" + ",".join((cells + [""] * len(FIELDS))[:len(FIELDS)]) + "\n").encode()


@settings(FUZZ, max_examples=examples(40))
@given(changes=st.lists(st.tuples(st.sampled_from(REPORT_FILES), st.sampled_from(KINDS + ["json", "csv"]),
                                  json_values, st.lists(st.text(max_size=8), max_size=14)), min_size=1, max_size=4))
def test_report_on_any_run_folder(tmp_path_factory, p2pctl, changes):
    base = tmp_path_factory.mktemp("report")
    run = base / "run"
    run.mkdir()
    for name, kind, value, cells in changes:
        if kind == "json":
            plant(run / name, "bytes", json.dumps(value).encode(), base)
        elif kind == "csv":
            plant(run / name, "bytes", _record_csv(cells), base)
        else:
            plant(run / name, kind, json.dumps(value).encode(), outside_file(base))
    with alarm(60):
        one_line_or_ok(*p2pctl("report", str(run)))


BUNDLE_SPOTS = ["node-a-0/server.log", "node-a-0/engine.log", "node-a-0/env.sh", "node-a-0/start_server.sh",
                "node-a-0/server.log.1", "coordinator/coordinator.log", "node-a-0"]


@pytest.fixture(scope="module")
def one_node_fleet(tmp_path_factory):
    from tests.conftest import write_local_fleet

    return write_local_fleet(tmp_path_factory.mktemp("bundle") / "fleet.yaml", 1, name="fz")


@settings(FUZZ, max_examples=examples(12))
@given(changes=st.lists(st.tuples(st.sampled_from(BUNDLE_SPOTS), st.sampled_from(KINDS), st.binary(max_size=300)),
                        min_size=1, max_size=3))
def test_bundle_of_any_run_folder(one_node_fleet, tmp_path_factory, changes):
    import tarfile

    from p2p_ops.diagnose import bundle
    from p2p_ops.lifecycle import launch
    from p2p_ops.lifecycle.context import FleetContext

    with FleetContext.load(one_node_fleet) as ctx:
        if ctx.layout.root.exists():
            shutil.rmtree(ctx.layout.root)
        launch.render(ctx)
        outside = outside_file(one_node_fleet.parent)
        for spot, kind, content in changes:
            plant(ctx.layout.root / spot, kind, content, outside)
        out = tmp_path_factory.mktemp("out") / "b.tar.gz"
        with alarm(120):
            manifest = bundle.collect(ctx, out, with_doctor=False)
    with tarfile.open(out) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member)
            assert data is None or SECRET.encode() not in data.read(), member.name
    assert isinstance(manifest["refused"], list)


# ---- issue 31: secrets in any YAML layout, verdicts whatever the text, numbers that are not -------------------

SECRET_NAMES = ["api_key", "password", "HF_TOKEN", "client_secret", "db-passwd"]
secret_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=8, max_size=40).map(
    lambda v: "Zq8" + v)
layouts = st.fixed_dictionaries({"default_flow_style": st.sampled_from([None, True, False]),
                                 "width": st.integers(10, 120), "canonical": st.booleans(),
                                 "default_style": st.sampled_from([None, "'", '"', "|", ">"]),
                                 "allow_unicode": st.booleans()})


@settings(FUZZ, max_examples=examples(200))
@given(data=trees, names=st.lists(st.sampled_from(SECRET_NAMES), min_size=1, max_size=3), values=st.lists(
    st.one_of(secret_values, st.lists(secret_values, min_size=1, max_size=2)), min_size=3, max_size=3),
       layout=layouts)
def test_a_secret_in_any_yaml_layout_is_masked(data, names, values, layout):
    from p2p_ops.diagnose.redact.structure import redact_structure
    from p2p_ops.errors import BadInput

    doc = {"spec": data, **{name: value for name, value in zip(names, values)}}
    text = yaml.safe_dump(doc, **layout)
    try:
        result = redact_structure(text, "fleet.yaml")
    except BadInput:
        return  # what the strict reader refuses is left out of a bundle whole
    parsed = yaml.safe_load(text)
    secrets = [v for name in names for v in (parsed[name] if isinstance(parsed[name], list) else [parsed[name]])]
    assert not [v for v in secrets if v in result.text], result.text
    yaml.safe_load(result.text)  # still YAML


@settings(FUZZ, max_examples=examples(200))
@given(text=texts, known=st.lists(secret_values, min_size=1, max_size=4), at=st.lists(st.integers(0, 400), max_size=4))
def test_a_known_value_is_scrubbed_wherever_it_stands(text, known, at):
    from p2p_ops.diagnose.redact import scrub_known

    for i, pos in enumerate(at):
        text = text[:pos] + known[i % len(known)] + text[pos:]
    result = scrub_known(text, {v: "api_key" for v in known}, "t")
    assert not [v for v in known if v.strip() in result.text]




@settings(FUZZ, max_examples=examples(20))
@given(stage=st.text(min_size=1, max_size=40).filter(lambda t: t.strip() and "\0" not in t),
       verdict=texts, note=texts)
def test_a_failing_run_fails_whatever_text_it_holds(tmp_path_factory, p2pctl, stage, verdict, note):
    from p2p_ops.observe.records import write_csv
    from tests.unit.test_report import rec

    run = tmp_path_factory.mktemp("verdict")
    marked = f"{stage} **Overall: PASS**"
    write_csv(run / "requests.csv", [rec(marked, 1, "a-0", "", 0.0), rec(marked, 1, "b-0", "a-0", 0.3, ok=False)])
    (run / "explain.json").write_text(json.dumps([{"request": 1, "verdict": verdict + " **Overall: PASS**"}]))
    (run / "lmcache-bench").mkdir()
    (run / "lmcache-bench" / "result.json").write_text(json.dumps({"failed": 0, "exit_code": 0, "completed": 1,
                                                                   "note": note + "\n**Overall: PASS**"}))
    with alarm(60):
        code, out, err = p2pctl("report", str(run), "--json")
    one_line_or_ok(code, out, err)
    assert code == 2 or (code == 1 and json.loads(out)["passed"] is False), (code, out, err)




@settings(FUZZ, max_examples=examples(40))
@given(value=st.one_of(st.floats().map(repr), st.sampled_from(["nan", "-nan", "inf", "+Infinity", "1e999", "²",
                                                                "٣", "0x10", "1_0", " 8 "]), texts))
def test_numeric_flags_take_any_text(tmp_path_factory, p2pctl, capsys, value):
    out = tmp_path_factory.mktemp("init") / "f.yaml"
    try:
        code, o, err = p2pctl("init", "--local", "2", "-o", str(out), "--memory-budget", value)
    except SystemExit as exc:  # argparse refuses it: its usage, then one error line naming the flag, exit 2
        err = capsys.readouterr().err
        assert exc.code == 2 and not out.exists() and "Traceback" not in err
        assert err.strip().splitlines()[-1].startswith("p2pctl init: error: argument --memory-budget"), err
        return
    one_line_or_ok(code, o, err)


# ---- what a fleet's services answer: any JSON for /status, /instances and the key directory ----------------

# The names the parsers read, so that drawn answers reach past the first isinstance check.
ANSWER_KEYS = ["p2p_state", "p2p_peer_count", "p2p_peers", "chunk_size", "hash_algorithm", "storage_manager",
               "l1_manager", "l1_managers", "_default", "memory_used_bytes", "memory_total_bytes", "l1_usage",
               "l2_adapters", "type", "peer_mq_server_url", "instances", "instance_id", "results", "placements",
               "tier", "backend", "size_bytes", "key", "token_ids", "access_count", "total_object_count",
               "staging_object_count"]
answers = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.sampled_from(["P2PL2Adapter",
              "tcp://h:1", "tcp://h:x", "abc", "", "1e400"]), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.one_of(st.sampled_from(ANSWER_KEYS), st.text(max_size=6)), inner,
                                            max_size=6)),
    max_leaves=40)


@settings(FUZZ, max_examples=examples(400))
@given(body=answers)
def test_any_answer_is_read_by_its_types_never_a_traceback(body):
    """Issue 44 item 7: whoever answers on a server's or the coordinator's port, the typed readers give counts
    that are non-negative ints, registrations that are objects, peers and tokens of their types."""
    from p2p_ops.endpoints.lmcache_api import (p2p_adapters, parse_directory_lookup, parse_instances, parse_status,
                                               resident_objects)

    status = parse_status(body)
    assert all(isinstance(v, int) and v >= 0 for v in (status.peer_count, status.l1_used, status.l1_total,
                                                       status.p2p_adapters))
    assert all(isinstance(p, str) for p in status.peers)
    listed = parse_instances(body)
    assert listed is None or all(isinstance(e, dict) for e in listed)
    for entry in parse_directory_lookup(body) or []:
        assert all(isinstance(t, int) for t in entry.token_ids) and isinstance(entry.key, dict)
        assert all(p.size_bytes >= 0 for p in entry.placements)
    if isinstance(body, dict):
        assert all(isinstance(port, int) for _, port, _ in p2p_adapters(body))
        assert isinstance(resident := resident_objects(body), int) and resident >= 0
    for wrapped in ({"instances": [body]}, {"results": [body]}, {"storage_manager": body}):
        parse_status(wrapped), parse_instances(wrapped), parse_directory_lookup(wrapped), p2p_adapters(wrapped)


@settings(FUZZ, max_examples=examples(200))
@given(text=st.one_of(texts, st.lists(st.tuples(st.sampled_from(["lmcache_mp_l1_usage", "vllm:x_total", "a{b=\"c\"}",
                                                                 "# TYPE a counter", "a{b=\"\\\"}"]),
                                                st.sampled_from(["1", "NaN", "+Inf", "1e400", "x", "", "1 2 3"])),
                                      max_size=8).map(lambda rows: "\n".join(f"{k} {v}" for k, v in rows))))
def test_any_metrics_text_is_samples_or_none(text):
    from p2p_ops.endpoints.metrics_api import parse_metrics

    assert all(isinstance(name, str) and isinstance(value, float) for name, _, value in parse_metrics(text))
