"""Before anything starts: is each node ready to run its part (`probe`, assessed by `readiness`), and the one
acting part, installing the runtime on a node that lacks it (`bootstrap`)."""
