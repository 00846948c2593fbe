"""The tree's `nic:plan` check: each instance's UCX_NET_DEVICES against its NIC plan, from the doctor's facts.

A pin that leaves the plan's rails unused (a TCP interface while RDMA ports are active, one rail of several) is
the problem this check reports; a pin on a down or remote-NUMA port is the doctor's `nic_pin`, which the same
step runs, so it is not reported twice.
"""

from __future__ import annotations

from p2p_ops.diagnose.doctor.nic import PinView, pin_views
from p2p_ops.diagnose.tree.evidence import Evidence, Observation

CHECK = "nic:plan"


def _shown(view: PinView) -> str:
    plan = view.plan
    pin = f"UCX_NET_DEVICES={view.pin or '(unset: all)'} ({view.where})"
    return f"{pin}; plan: {plan.net_devices or '(none active)'} {plan.max_rma_rails} rail(s) ({plan.why})"


def _one(view: PinView) -> Observation:
    if view.narrow:
        return Observation(CHECK, "problem", view.instance, f"{view.narrow}; {_shown(view)}", view.fix)
    if view.wrong:
        return Observation(CHECK, "info", view.instance, f"{_shown(view)}; see nic_pin: {'; '.join(view.wrong)}")
    return Observation(CHECK, "ok", view.instance, _shown(view))


def nic_plan(ev: Evidence) -> list[Observation]:
    if ev.facts is None:
        return [Observation(CHECK, "unknown", "fleet", "no fleet to check (pass -f fleet.yaml)")]
    views = pin_views(ev.facts)
    if not views:
        return [Observation(CHECK, "unknown", "fleet", "no node with RDMA devices read: nothing to plan")]
    return [_one(v) for v in views]
