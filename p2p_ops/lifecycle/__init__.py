"""Bringing a fleet up and down and saying how it is: the layer that acts on nodes.

`context` (the loaded fleet plus a connector per node) is what every verb takes; `render` writes env.sh and
start wrappers; `procs` starts and stops detached processes by pidfile; `launch` is up, wait and down;
`dryrun` what `up` would do; `status` what runs now; `router` and `prometheus` the fleet's optional units;
`preflight/` the node probe (`p2pctl probe`) and its one act, the bootstrap.
"""
