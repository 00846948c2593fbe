"""The jinja2 templates, shipped as the package `p2p_ops.templates` (see pyproject.toml and p2p_ops/resources.py)."""
