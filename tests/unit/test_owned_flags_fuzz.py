"""The fuzz tier for extra flags (issue 31, item 2): every spelling of an owned flag that the program's own parser
reads as that flag is refused, and nothing it reads as another flag is.

lmcache server's spellings are checked against the installed lmcache's real parser (argparse's own prefix rule);
vLLM's and vllm-router's, whose parsers are not installed here, against the rules spec.flags states for them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_ops.errors import BadInput
from p2p_ops.spec.flags import LMCACHE_SERVER, ROUTER, VLLM
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet

pytestmark = pytest.mark.fuzz
SCALE = float(os.environ.get("P2P_FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


@pytest.fixture(scope="module")
def lmcache_parser() -> argparse.ArgumentParser:
    if importlib.util.find_spec("lmcache") is None:
        pytest.skip("lmcache is not installed")
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    from lmcache.cli.commands.server import ServerCommand

    parser = argparse.ArgumentParser(prog="lmcache server")
    ServerCommand().add_arguments(parser)
    if len(parser._option_string_actions) < 50:
        pytest.skip("this lmcache is the light CLI: `lmcache server` has no flags here")
    return parser


def argparse_reads(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The flag the parser reads `word` as ("ambiguous" when it refuses to choose; None: not a flag)."""
    try:
        found = parser._parse_optional(word)
    except SystemExit:
        return "ambiguous"
    if isinstance(found, list):  # Python >= 3.12: a list of candidates
        found = found[0] if len(found) == 1 else None
    if not found or found[0] is None:
        return None
    action = found[0]
    return next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])


def spellings(flags: list[str]):
    """A flag cut short anywhere after `--`, maybe with `=value`."""
    return st.tuples(st.sampled_from(flags), st.integers(3, 40), st.sampled_from(["", "=0.0.0.0", "=1"])).map(
        lambda t: t[0][:t[1]] + t[2])


def test_no_lmcache_flag_is_a_prefix_of_an_owned_one(lmcache_parser):
    # What makes refusing every prefix of an owned flag exact: argparse would read none of them as another flag.
    flags = [f for f in lmcache_parser._option_string_actions if f.startswith("--")]
    assert set(LMCACHE_SERVER.owned) <= set(flags), set(LMCACHE_SERVER.owned) - set(flags)
    assert not [f for f in flags if f not in LMCACHE_SERVER.owned and LMCACHE_SERVER.flag_of(f)]


def test_lmcache_server_reads_a_word_as_an_owned_flag_exactly_when_validate_refuses_it(lmcache_parser):
    flags = sorted(f for f in lmcache_parser._option_string_actions if f.startswith("--"))

    @settings(FUZZ, max_examples=examples(400))
    @given(word=spellings(flags))
    def check(word):
        ours, theirs = LMCACHE_SERVER.flag_of(word), argparse_reads(lmcache_parser, word)
        if theirs in LMCACHE_SERVER.owned:
            assert ours == theirs, (word, ours, theirs)
        elif ours is not None:
            assert theirs == "ambiguous", (word, ours, theirs)  # lmcache would not start: refusing costs nothing

    check()


def vllm_spelling(flag: str, cut: int, underscores: list[bool], tail: str) -> str:
    name = flag[:max(3, len(flag) - cut)]
    name = "".join("_" if c == "-" and i > 1 and underscores[i % len(underscores)] else c for i, c in enumerate(name))
    return name + tail


@settings(FUZZ, max_examples=examples(300))
@given(flag=st.sampled_from(sorted(VLLM.owned)), cut=st.integers(0, 30), underscores=st.lists(st.booleans(),
       min_size=1, max_size=5), tail=st.sampled_from(["", "=0.0.0.0", ".kv_connector", ".a.b=1"]))
def test_vllm_reads_every_prefix_underscore_and_dotted_spelling_as_the_flag(flag, cut, underscores, tail):
    word = vllm_spelling(flag, cut, underscores, tail)
    found = VLLM.flag_of(word)
    name = word.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    assert found is not None and found.startswith(name), (word, found)


@settings(FUZZ, max_examples=examples(150))
@given(where=st.sampled_from(["server", "instance", "vllm", "router"]), before=st.lists(
       st.sampled_from(["--max-num-seqs", "8", "--trace", "x", "--enable", "--request-timeout-secs"]), max_size=3),
       owned=st.data())
def test_any_owned_flag_anywhere_in_the_list_is_one_line_naming_the_field(where, before, owned):
    program = {"server": LMCACHE_SERVER, "instance": LMCACHE_SERVER, "vllm": VLLM, "router": ROUTER}[where]
    flag = owned.draw(st.sampled_from(sorted(program.owned)))
    word = flag + owned.draw(st.sampled_from(["", "=0.0.0.0"]))
    args = before + [word, "0.0.0.0"]
    data = local_fleet(2, name="v", runtime="vllm", cpu_count=2) if where == "vllm" else local_fleet(2)
    field = {"server": "settings.server_extra_args", "instance": "nodes[0].instances[0].settings.server_extra_args",
             "vllm": "vllm.args", "router": "router.args"}[where]
    if where == "server":
        data["settings"]["server_extra_args"] = args
    elif where == "instance":
        data["nodes"][0]["instances"][0]["settings"] = {"server_extra_args": args}
    elif where == "vllm":
        data["vllm"]["args"] = args
    else:
        data["router"] = {"enabled": True, "args": args}
    with pytest.raises(BadInput) as exc:
        parse_fleet(data)
    msg = str(exc.value)
    assert msg.startswith(field + ":") and flag in msg and "\n" not in msg, msg
