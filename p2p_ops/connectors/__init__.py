"""Connectors run commands on a node: `local` (subprocess) or `ssh` (fabric). Same small API for both."""

from __future__ import annotations

from p2p_ops.connectors.base import CommandFailed, Connector, Result
from p2p_ops.connectors.local import LocalConnector


def connector_for(node) -> Connector:
    if node.connection == "ssh":
        from p2p_ops.connectors.ssh import SSHConnector  # fabric is only imported when needed

        return SSHConnector.for_node(node)
    return LocalConnector(node.name)


__all__ = ["CommandFailed", "Connector", "LocalConnector", "Result", "connector_for"]
