"""The fleet spec: what a fleet is, before anything runs.

`model` (nodes, instances, ports) and `settings` (the settings sections) are the typed `fleet.yaml`; `load`
reads and validates it; `starter` writes the fleet `p2pctl init` gives; `agreement` is the one list of what peers
must agree on; `ports` the starter port plan; `layout` where a fleet's state lives; `units` the table of fleet
processes. Nothing here starts, reads or changes a node.
"""
