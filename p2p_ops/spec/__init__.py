"""The fleet spec: what a fleet is, before anything runs. Nothing here starts, reads or changes a node."""
