"""What kills an `lmcache server` (0.5.6) at start is refused by `validate` (issue 40, item 5): one line naming the
field and a value that works, exit 2. Each row was checked against LMCache's source (spec/startup.py says where);
the L1 size and the tcp transfer engine against a real server too (tests/fixtures/diagnose/start_refusals/)."""

from __future__ import annotations

import copy

import pytest
import yaml

from p2p_ops.errors import BadInput
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.sizing import REAL_LADDER, TINY_LADDER, node_size
from p2p_ops.spec.starter import local_fleet
from p2p_ops.spec.startup import GIB, nearest_l1
from p2p_runtime.profiles import PROFILE_NAMES, resolve


def _fleet(settings: dict | None = None, instance: dict | None = None) -> dict:
    data = copy.deepcopy(local_fleet(4))
    data["settings"].update(settings or {})
    if instance is not None:
        data["nodes"][3]["instances"][0]["settings"] = instance
    return data


def test_validate_refuses_an_l1_that_is_not_whole_pages_naming_the_nearest_valid_sizes(tmp_path, p2pctl):
    """The size a user met: node-d's server died at start with an L1 of 0.1 GB (NIXL_ERR_NOT_FOUND)."""
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(_fleet(instance={"l1_size_gb": 0.1})))
    code, _, err = p2pctl("validate", "-f", str(f))
    assert code == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line.startswith("p2pctl validate: nodes[3].instances[0].settings.l1_size_gb: 0.1 GiB is 107374182 bytes, "
                           "not a multiple of l1_align_bytes (65536 bytes)"), line
    assert "NIXL_ERR_NOT_FOUND" in line and line.endswith("nearest valid 0.0999755859375 or 0.10003662109375"), line


REFUSED = [
    # (label, settings, instance settings, where, what the line must hold)
    ("fleet-wide L1 of 0.1 GiB", {"l1_size_gb": 0.1}, None, "settings.l1_size_gb",
     "0.1 GiB is 107374182 bytes, not a multiple of l1_align_bytes (65536 bytes)"),
    ("L1 below one page: only the size above", {"l1_size_gb": 1e-6}, None, "settings.l1_size_gb",
     "nearest valid 0.00006103515625"),
    ("L1 smaller than a 1 GiB page", {"l1_size_gb": 0.5, "l1_align_bytes": 1 << 30}, None, "settings.l1_size_gb",
     "nearest valid 1"),
    ("a fraction 4096-byte pages do not divide", {"l1_size_gb": 0.3, "l1_align_bytes": 4096}, None,
     "settings.l1_size_gb", "nearest valid 0.299999237060546875 or 0.3000030517578125"),
    ("no tcp transfer channel in LMCache 0.5.6", {"transfer_engine": "tcp"}, None, "settings.transfer_engine",
     "Input should be 'nixl' or 'mooncake_te'"),
    ("--l1-manager beside the L1 flags p2pctl passes", {"server_extra_args": ["--l1-manager", "{}"]}, None,
     "settings.server_extra_args", "lmcache server --l1-manager, which would replace the L1 p2pctl sets from "
                                   "settings.l1_size_gb"),
    ("hugepages beside a shared-memory L1", {"shm_transport": True, "server_extra_args": ["--l1-use-hugepages"]},
     None, "settings.server_extra_args", "set settings.shm_transport: false"),
    ("one instance's shared-memory L1 with the fleet's hugepages", {"server_extra_args": ["--l1-use-huge"]},
     {"shm_transport": True}, "settings.server_extra_args", "lmcache server --l1-use-hugepages"),
    ("a Device-DAX L1 beside a shared-memory L1", {"p2p": False}, {"shm_transport": True,
     "server_extra_args": ["--l1-devdax-path=/dev/dax0.0"]}, "nodes[3].instances[0].settings.server_extra_args",
     "set settings.shm_transport: false"),
    ("no observability bus for the cache events", {"server_extra_args": ["--disable-observability"]}, None,
     "settings.server_extra_args", "set settings.cache_events: false"),
]


@pytest.mark.parametrize("label,settings,instance,where,expected", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_kills_a_server_at_start_is_refused_in_one_line(label, settings, instance, where, expected):
    with pytest.raises(BadInput) as exc:
        parse_fleet(_fleet(settings, instance))
    msg = str(exc.value)
    assert msg.startswith(where + ":") and expected in msg and "\n" not in msg, msg


ACCEPTED = [
    ("whole GiB", {"l1_size_gb": 1}, None), ("two GiB", {"l1_size_gb": 2}, None),
    ("half a GiB", {"l1_size_gb": 0.5}, None), ("the sizing ladder's smallest", {"l1_size_gb": 0.125}, None),
    ("the nearest below 0.1", None, {"l1_size_gb": 0.0999755859375}),
    ("the nearest above 0.1", None, {"l1_size_gb": 0.10003662109375}),
    ("a quarter GiB of 4 KiB pages", {"l1_size_gb": 0.25, "l1_align_bytes": 4096}, None),
    ("hugepages without a shared-memory L1", {"server_extra_args": ["--l1-use-hugepages"]}, None),
    ("hugepages off beside a shared-memory L1", {"shm_transport": True,
                                                 "server_extra_args": ["--no-l1-use-hugepages"]}, None),
    ("no observability without cache events", {"cache_events": False,
                                               "server_extra_args": ["--disable-observability"]}, None),
]


@pytest.mark.parametrize("label,settings,instance", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_sizes_and_flags_a_server_starts_with_pass(label, settings, instance):
    parse_fleet(_fleet(settings, instance))


@pytest.mark.parametrize("gb,align,near", [
    (0.1, 65536, ["0.0999755859375", "0.10003662109375"]), (1, 65536, []), (0.0625, 65536, []),
    (0.0999755859375, 65536, []), (1e-12, 4096, ["0.000003814697265625"]), (4095.9999, 1 << 30, ["4095", "4096"]),
])
def test_nearest_sizes_are_exact_whole_pages(gb, align, near):
    assert nearest_l1(gb, align) == near
    for size in near:  # what LMCache makes of each: int(float(text) * 2**30), whole pages
        assert int(float(size) * GIB) % align == 0 and not nearest_l1(float(size), align)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_every_sizing_step_of_every_profile_is_whole_pages(profile):
    kv = resolve(profile, 2, 4, 32)
    for l1, context in (TINY_LADDER if profile == "tiny" else REAL_LADDER):
        size = node_size(kv, l1, context)
        assert not nearest_l1(size.l1_size_gb, kv.l1_align_bytes), (profile, l1, context, size.l1_size_gb)


@pytest.mark.parametrize("n,profile,budget", [(2, "tiny", None), (8, "tiny", 12.0), (4, "llama-3-8b", 100.0),
                                              (4, "qwen3-32b", 9.0), (2, "gpt-oss-120b", 6.0)])
def test_starter_fleets_still_validate(n, profile, budget):
    parse_fleet(local_fleet(n, profile=profile, memory_budget_gib=budget))
