"""Verbs that need a running fleet say so first, naming `p2pctl up`, instead of measuring nothing."""

from __future__ import annotations

import pytest

from tests.conftest import write_local_fleet

NEEDS_A_FLEET = [("test", "basic"), ("test", "stress", "--quick"), ("test", "all", "--quick"),
                 ("test", "faults", "--quick"), ("calibrate", "--quick")]


@pytest.mark.parametrize("argv", NEEDS_A_FLEET, ids=[" ".join(a) for a in NEEDS_A_FLEET])
def test_a_verb_on_a_fleet_that_is_not_up_refuses_at_once(tmp_path, p2pctl, argv):
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="down")
    code, out, err = p2pctl(*argv, "-f", str(fleet))
    assert code == 2, (out, err)
    assert "is not running" in err and f"p2pctl up -f {fleet}" in err and "Traceback" not in err
    assert not (tmp_path / "p2p-run" / "down" / "tests").exists()  # no run folder for a run that never ran
