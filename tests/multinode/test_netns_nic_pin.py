"""A planted wrong NIC pin on the netns testbed, found by the decision tree's "single NIC or TCP" branch.

Two namespaced hosts, each with its own eth0; h2-0's spec pins UCX_NET_DEVICES to `eth9`, an interface h2 does
not have. The fleet is only rendered (env.sh written to each host over SSH), not started: the doctor reads the
pin from h2's env.sh and the interfaces from h2's own namespace (`ip -o -4 addr show` over SSH), and the branch
must name h2-0, the absent eth9, and the fix (eth0, which holds h2's address, then the server restart).
Bounded: testbed up and down plus one render and one doctor pass (no lmcache process starts).
"""

from __future__ import annotations

import yaml

import pytest

from bench import testbed
from p2p_ops.diagnose.tree import evidence, model, walk
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.multinode.conftest import needs_sshd, write_ssh_fleet
from tests.multinode.test_netns_counters import _netns_allowed

pytestmark = [pytest.mark.multinode, needs_sshd]


def test_the_tcp_branch_names_the_instance_its_absent_nic_and_the_fix(tmp_path):
    why = _netns_allowed()
    if why:
        pytest.skip(why)
    with testbed.running(2, testbed.private_dir(), netns=True) as tb:
        path = write_ssh_fleet(tb, tmp_path, "pin", settings={"ucx_tls": "tcp"})
        data = yaml.safe_load(path.read_text())
        data["nodes"][1]["instances"][0]["settings"] = {"ucx_net_devices": "eth9"}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        h2 = tb.host("h2")
        with FleetContext.load(path) as ctx:
            launch.render(ctx)
            tree = model.load_tree()
            d = walk.diagnose(tree, model.find_symptom(tree, "wrong nic"), evidence.Evidence(ctx, tree, reach=False))
    step = next(s for s in d.steps if s.id == "nic-plan")
    problems = [o for o in step.observations if o.status == "problem"]
    assert step.verdict == "problem" and {o.subject for o in problems} == {"h2-0"}, \
        [(o.status, o.subject, o.detail) for o in step.observations]
    text = " ".join(f"{o.detail} {o.fix}" for o in problems)
    assert "UCX_NET_DEVICES=eth9" in text and "eth9 holds no IPv4 address on h2" in text
    assert f"{h2.address} (on eth0)" in text and "give h2-0 UCX_NET_DEVICES=eth0" in text
    assert "p2pctl down --node h2 --role server && p2pctl up --node h2 --role server" in text
    assert d.exit_code == 1
