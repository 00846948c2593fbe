"""The one judge of *why*: every verb that names a cause (explain, doctor, diagnose's likely cause, `test basic` /
`matrix`, calibrate's and placement's margins, bundle) reads it, so no two can name different causes for one
fleet. The causes it can name are the catalogue's (`p2p_ops.causes`: what each means, its fix, its scope, how
specific its evidence is); the judge decides which applies and gives its `Verdict`.

Modules, one concept each: `fleet` (a fleet's state: the doctor's findings ranked by the catalogue's ranking),
`chunk` (why one chunk of a prompt would miss on one instance), `request` (what a proof's own requests show,
and the one cause of a failed proof pair), `margin` (why a measured P2P margin or crossover is what it is). Each
decides from evidence another module gathered; none reads the fleet itself but `fleet.judge`, through the
doctor's one gather.
"""

from p2p_ops.diagnose.judge.fleet import Judgement, judge, judgement

__all__ = ["Judgement", "judge", "judgement"]
