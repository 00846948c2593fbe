"""The fleet spec: a good file loads; every bad one is refused with one line naming the field and exit 2."""

from __future__ import annotations

import copy

import pytest
import yaml

from p2p_ops.errors import BadInput
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet


def base() -> dict:
    return local_fleet(2)


def set_path(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    cur = data
    parts = path.replace("]", "").replace("[", ".").split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if p.isdigit() else cur[p]
    last = parts[-1]
    if value is DELETE:
        del cur[int(last) if last.isdigit() else last]
    else:
        cur[int(last) if last.isdigit() else last] = value
    return data


DELETE = object()

BAD = [
    ("unknown top-level key", "nodez", [], "nodez: unknown key 'nodez'"),
    ("missing name", "name", DELETE, "name: required field is missing"),
    ("port out of range", "nodes[0].instances[0].ports.http", 70000, "nodes[0].instances[0].ports.http:"),
    ("port clash on one host", "nodes[1].instances[0].ports.http", "@a.http",
     "nodes[1].instances[0].ports.http: {a_http} is already used by node-a-0 on 127.0.0.1"),
    ("port clash with the coordinator", "nodes[0].instances[0].ports.mp", "@coord",
     "nodes[0].instances[0].ports.mp: {coord} is already used by the coordinator"),
    ("duplicate instance id", "nodes[1].instances[0].id", "node-a-0",
     "nodes[1].instances[0].id: 'node-a-0' is already used by nodes[0].instances[0]"),
    ("duplicate node name", "nodes[1].name", "node-a", "nodes[1].name: 'node-a' is already used by nodes[0]"),
    ("per-instance chunk size", "nodes[0].instances[0].settings", {"chunk_size": 512},
     "nodes[0].instances[0].settings.chunk_size: must be identical across peers"),
    ("per-instance PYTHONHASHSEED", "nodes[1].instances[0].settings", {"python_hash_seed": 7},
     "nodes[1].instances[0].settings.python_hash_seed: must be identical across peers"),
    ("per-instance hash algorithm", "nodes[0].instances[0].settings", {"hash_algorithm": "builtin"},
     "settings.hash_algorithm: must be identical across peers"),
    ("per-instance L1 alignment", "nodes[0].instances[0].settings", {"l1_align_bytes": 4096},
     "settings.l1_align_bytes: must be identical across peers"),
    ("per-instance model", "nodes[0].instances[0].settings", {"model": "other"},
     "nodes[0].instances[0].settings.model: must be identical across peers and cannot be overridden per "
     "instance; set it once as model"),
    ("id with shell characters", "nodes[0].instances[0].id", "a;rm -rf /",
     "nodes[0].instances[0].id: Value error, 'a;rm -rf /' may only contain letters"),
    ("unknown runtime", "runtime", "tensorrt", "runtime: Input should be 'embedded' or 'vllm'"),
    ("unknown hash algorithm", "settings.hash_algorithm", "md5", "settings.hash_algorithm:"),
    ("builtin hash without vLLM", "settings.hash_algorithm", "builtin",
     "settings.hash_algorithm: 'builtin' needs runtime: vllm (without vLLM, LMCache falls back to a per-process"),
    ("sha256_cbor without vLLM", "settings.hash_algorithm", "sha256_cbor",
     "settings.hash_algorithm: 'sha256_cbor' needs runtime: vllm"),
    ("alignment not a power of two", "settings.l1_align_bytes", 65535, "settings.l1_align_bytes:"),
    ("local node on a remote address", "nodes[0].address", "10.0.0.5",
     "nodes[0].address: '10.0.0.5' is not a loopback address"),
    ("no nodes", "nodes", [], "nodes: List should have at least 1 item"),
    ("missing engine port", "nodes[0].instances[0].ports.engine", DELETE,
     "nodes[0].instances[0].ports.engine: required field is missing"),
    ("wrong type", "settings.chunk_size", "big", "settings.chunk_size: Input should be a valid integer"),
    ("model with @", "model", "a@b", "model: Value error"),
    ("instance id ..", "nodes[0].instances[0].id", "..", "nodes[0].instances[0].id: Value error, '..' is not a usable"),
    ("instance id .", "nodes[0].instances[0].id", ".", "nodes[0].instances[0].id: Value error, '.' is not a usable"),
    ("instance id coordinator", "nodes[1].instances[0].id", "coordinator",
     "nodes[1].instances[0].id: Value error, 'coordinator' is reserved"),
    ("instance id tests", "nodes[1].instances[0].id", "tests", "nodes[1].instances[0].id: Value error, 'tests' is"),
    ("instance id with a trailing newline", "nodes[0].instances[0].id", "node-x\n",
     "nodes[0].instances[0].id: Value error, 'node-x\\n' "),
    ("node name ..", "nodes[0].name", "..", "nodes[0].name: Value error, '..' is not a usable"),
    ("fleet name ..", "name", "..", "name: Value error, '..' is not a usable"),
    ("fleet name with a newline", "name", "demo\n", "name: Value error, 'demo\\n' "),
    ("model with a newline", "model", "tiny\nllm", "model: Value error, 'tiny\\nllm' contains a control"),
    ("run_dir with a newline", "nodes[0].run_dir", "/tmp/a\nb", "nodes[0].run_dir: Value error, '/tmp/a\\nb' contains"),
    ("vllm arg with a newline", "vllm", {"args": ["--x", "a\nb"]}, "vllm.args: Value error, 'a\\nb'"),
    # What the engine itself would refuse at start, refused at validation in the spec's words.
    ("engine cache smaller than one request", "engine.num_blocks", 100,
     "engine: Value error, engine.num_blocks 100 x engine.block_size 16 cannot hold one engine.max_model_len "
     "8192 request; use engine.num_blocks >= 512"),
    ("odd engine head size", "engine.head_size", 31, "engine: Value error, engine.head_size must be even"),
    ("unknown engine log format", "engine.log_format", "xml", "engine.log_format must be text or json, got xml"),
    ("unknown engine key", "engine.num_layerz", 3, "engine.num_layerz: unknown key 'num_layerz'"),
    ("chunk not a multiple of the engine block", "settings.chunk_size", 200,
     "settings.chunk_size: 200 is not a multiple of engine.block_size 16; the engine stores whole blocks"),
]


@pytest.mark.parametrize("label,path,value,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_fleet_is_refused_with_one_line(tmp_path, p2pctl, label, path, value, expected):
    data = base()
    fmt = {"a_http": data["nodes"][0]["instances"][0]["ports"]["http"], "coord": data["coordinator"]["port"]}
    if value == "@a.http":
        value = fmt["a_http"]
    elif value == "@coord":
        value = fmt["coord"]
    if path == "nodez":
        data["nodez"] = value
    else:
        data = set_path(data, path, value)
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    code, out, err = p2pctl("validate", "-f", str(f))
    assert code == 2, (label, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {err!r}"
    assert expected.format(**fmt) in lines[0], lines[0]
    assert "Traceback" not in err


def test_invalid_yaml_names_the_line(tmp_path, p2pctl):
    f = tmp_path / "fleet.yaml"
    f.write_text("name: x\nnodes: [\n  - {name: a\n")
    code, _, err = p2pctl("validate", "-f", str(f))
    assert code == 2
    assert "is not valid YAML" in err and "line" in err


@pytest.mark.parametrize("escape", ["\\U7fffffff", "\\Uffffffff"])
def test_an_escape_naming_no_character_is_one_line(tmp_path, p2pctl, escape):
    # PyYAML hands these to chr() unguarded (ValueError, not a YAMLError); the fuzz tier found it
    f = tmp_path / "fleet.yaml"
    f.write_text(f'name: "{escape}"\n')
    code, _, err = p2pctl("validate", "-f", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "is not valid YAML (an escape names no character" in err and "Traceback" not in err


def test_missing_file_says_how_to_make_one(tmp_path, p2pctl):
    code, _, err = p2pctl("validate", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert "p2pctl init --local 2" in err


def test_good_fleet_loads_and_overrides_apply():
    data = base()
    data["nodes"][1]["instances"][0]["settings"] = {"l1_size_gb": 2, "log_level": "DEBUG"}
    fleet = parse_fleet(data)
    node, inst = fleet.instance("node-b-0")
    eff = fleet.effective_settings(inst)
    assert eff.l1_size_gb == 2 and eff.log_level == "DEBUG"
    assert eff.chunk_size == fleet.settings.chunk_size
    assert fleet.coordinator.host == "127.0.0.1"  # never 0.0.0.0 by default
    assert fleet.coordinator_node().name == "node-a"


def test_unknown_instance_is_a_clear_error():
    fleet = parse_fleet(base())
    with pytest.raises(BadInput, match="no instance 'zz'.*known: node-a-0, node-b-0"):
        fleet.instance("zz")


def test_init_writes_a_fleet_that_validates(tmp_path, p2pctl):
    out = tmp_path / "fleet.yaml"
    code, _, _ = p2pctl("init", "--local", "3", "-o", str(out))
    assert code == 0
    code, stdout, _ = p2pctl("validate", "-f", str(out))
    assert code == 0 and "3 instance(s)" in stdout
    code, _, err = p2pctl("init", "--local", "3", "-o", str(out))
    assert code == 2 and "already exists" in err


BAD_VLLM = [
    ("chunk not a multiple of the CPU block", "settings.chunk_size", 192,
     "settings.chunk_size: 192 is not a multiple of vLLM's block size 128"),
    ("CPU block size vLLM cannot run", "vllm.block_size", 64,
     "vllm.block_size: 64 is not supported by vLLM's CPU backend"),
    ("a GPU on a CPU fleet", "nodes[1].instances[0].gpu", 0, "nodes[1].instances[0].gpu: set on a vllm.device: cpu"),
    ("a core list that is not one", "nodes[0].instances[0].cpus", "0-; rm", "nodes[0].instances[0].cpus:"),
    ("a flag p2pctl owns", "vllm.args", ["--port=9"],
     "vllm.args: Value error, '--port=9' is vLLM --port, which p2pctl sets from instances[].ports.engine"),
    ("unknown vllm key", "vllm.gpus", 2, "vllm.gpus: unknown key 'gpus'"),
    ("unknown device", "vllm.device", "tpu", "vllm.device: Input should be 'cuda' or 'cpu'"),
    ("a relative vLLM venv", "vllm.venv", ".venv-vllm", "vllm.venv: '.venv-vllm' is relative; use an absolute"),
    ("a relative model folder", "vllm.model_path", "./models/tiny", "vllm.model_path: './models/tiny' is relative"),
    ("a relative node vLLM venv", "nodes[1].vllm_venv", "v/env", "nodes[1].vllm_venv: 'v/env' is relative"),
    ("a model path that is no hub id", "vllm.model_path", "models/tiny/llama",
     "vllm.model_path: 'models/tiny/llama' is relative; use an absolute path"),
    ("a model path under ~", "vllm.model_path", "~/models/tiny", "vllm.model_path: '~/models/tiny' is relative"),
]


@pytest.mark.parametrize("label,path,value,expected", BAD_VLLM, ids=[b[0] for b in BAD_VLLM])
def test_bad_vllm_fleet_is_refused_with_one_line(tmp_path, p2pctl, label, path, value, expected):
    data = set_path(local_fleet(2, name="v", runtime="vllm", cpu_count=2), path, value)
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    code, _, err = p2pctl("validate", "-f", str(f))
    assert code == 2, (label, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err


def test_hub_id_is_a_model_path_unless_it_names_a_folder_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = set_path(local_fleet(2, name="v", runtime="vllm", cpu_count=2), "vllm.model_path", "models/tiny-llama")
    assert parse_fleet(data).vllm.model_path == "models/tiny-llama"  # owner/name: a hub id
    (tmp_path / "models" / "tiny-llama").mkdir(parents=True)
    with pytest.raises(BadInput) as exc:
        parse_fleet(data)
    assert str(exc.value) == ("vllm.model_path: 'models/tiny-llama' is relative; use an absolute path (engines start "
                              f"in their own run folders), e.g. '{tmp_path}/models/tiny-llama'")


def test_init_vllm_writes_absolute_paths_that_mean_the_same_anywhere(tmp_path, monkeypatch, p2pctl):
    from p2p_ops.resources import CHECKOUT

    (tmp_path / "here").mkdir()
    (tmp_path / "fleets").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    out = tmp_path / "fleets" / "fleet.yaml"
    code, _, err = p2pctl("init", "--local", "2", "--runtime", "vllm", "-o", "../fleets/fleet.yaml")
    assert code == 0, err
    vllm = yaml.safe_load(out.read_text())["vllm"]
    # The model beside the fleet file (not beside the caller), the venv where `make setup-vllm` puts it.
    assert vllm["model_path"] == str(tmp_path / "fleets" / "models" / "tiny-llama")
    assert vllm["venv"] == str(CHECKOUT / ".venv-vllm")
    code, _, err = p2pctl("init", "--local", "2", "--runtime", "vllm", "-o", str(out), "--force",
                          "--model-path", "m", "--vllm-venv", "../v")
    assert code == 0, err
    vllm = yaml.safe_load(out.read_text())["vllm"]
    assert (vllm["model_path"], vllm["venv"]) == (str(tmp_path / "here" / "m"), str(tmp_path / "v"))  # as typed here
    monkeypatch.chdir(tmp_path)
    code, stdout, err = p2pctl("validate", "-f", str(out))
    assert code == 0, err


def test_init_into_a_missing_folder_is_one_line(tmp_path, p2pctl):
    code, _, err = p2pctl("init", "--local", "2", "-o", str(tmp_path / "no" / "fleet.yaml"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not exist; create it" in err, err


def test_cuda_fleet_takes_any_multiple_of_its_block_size():
    data = local_fleet(2, name="v", runtime="vllm", vllm={"device": "cuda", "block_size": 16})
    for node in data["nodes"]:
        node["instances"][0].pop("cpus", None)
    data["settings"]["chunk_size"] = 64
    fleet = parse_fleet(data)
    assert fleet.vllm.effective_block_size() == 16


def test_dry_run_with_a_newline_in_a_value_is_one_line(tmp_path, p2pctl):
    data = set_path(base(), "model", "tiny\nllm")
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    code, out, err = p2pctl("up", "--dry-run", "-f", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "model:" in err


@pytest.mark.parametrize("value", ["node-x\n", "..", ".", "a/b", ""])
def test_id_check_is_a_full_match(value):
    from p2p_ops.spec.model import _check_id

    with pytest.raises(ValueError):
        _check_id(value)


def test_builtin_hash_is_fine_with_vllm():
    data = base()
    data["runtime"] = "vllm"
    data["settings"]["hash_algorithm"] = "builtin"
    assert parse_fleet(data).settings.hash_algorithm == "builtin"


@pytest.mark.parametrize("raw", [b"name: a\x1fb\n", b"name: \xff\xfe\n", b"\x00"])
def test_unreadable_file_is_one_line(tmp_path, p2pctl, raw):
    f = tmp_path / "fleet.yaml"
    f.write_bytes(raw)
    code, out, err = p2pctl("validate", "-f", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
