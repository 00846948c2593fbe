"""The one judge of *why*: every verb that names a cause (explain, doctor, diagnose's likely cause, `test basic` /
`matrix`, calibrate's and placement's margins, bundle) reads it, so no two can name different causes for one
fleet.

Modules, one concept each: `catalogue` (every cause: what it means, the evidence that confirms it and rules it
out, its one fix and the fix's scope; data only), `fleet` (a fleet's state: the doctor's findings ranked by how
specific their evidence is), `chunk` (why one chunk of a prompt would miss on one instance), `margin` (why a
measured P2P margin or crossover is what it is). Each decides from evidence another module gathered; none reads
the fleet itself but `fleet.judge`, through the doctor's one gather.
"""

from p2p_ops.diagnose.judge.catalogue import CAUSES, MEASURED, UNCONFIRMED, Cause, measured_cause, specificity
from p2p_ops.diagnose.judge.fleet import Judgement, judge, judgement

__all__ = ["CAUSES", "MEASURED", "UNCONFIRMED", "Cause", "Judgement", "judge", "judgement", "measured_cause",
           "specificity"]
