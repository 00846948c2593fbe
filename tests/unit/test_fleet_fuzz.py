"""Fuzz the fleet spec with hypothesis: whatever the file holds, `p2pctl validate` answers with exit 0, or with
exit 2 and one line (no traceback)."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2p_ops.spec.starter import local_fleet

GOOD = local_fleet(2)


def _paths(data, prefix=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


PATHS = sorted(_paths(GOOD), key=str)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=40), st.sampled_from(["..", ".", "coordinator", "a\nb", "0.0.0.0", "::1",
                                                           "$(touch /tmp/x)", "builtin", "vllm", "-1", "1e309"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _set(data, path, value):
    cur = data
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3),
       raw=st.one_of(st.none(), st.text(max_size=60)))
def test_any_spec_is_ok_or_one_line_exit_2(tmp_path_factory, p2pctl, edits, raw):
    f = tmp_path_factory.mktemp("fuzz") / "fleet.yaml"
    if raw is not None and len(raw) % 3 == 0:
        f.write_text(raw)  # sometimes not a fleet at all, or not YAML
    else:
        data = copy.deepcopy(GOOD)
        for path, value in edits:
            try:
                _set(data, path, value)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier edit replaced the parent
        f.write_text(yaml.safe_dump(data))
    code, out, err = p2pctl("validate", "-f", str(f))
    assert code in (0, 2), (code, out, err)
    assert "Traceback" not in out + err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
