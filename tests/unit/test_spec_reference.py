"""The fleet-spec reference documents every field of the spec and every key `init` writes: a field `init` writes
cannot go missing from it again (issue 42: settings.cache_events and engine.profile did)."""

from __future__ import annotations

import re

import pydantic
import pytest

from p2p_ops.spec import model, settings
from p2p_ops.spec.starter import local_fleet
from tests.conftest import REPO

REFERENCES = REPO / ".claude" / "skills" / "lmcache-p2p-launch" / "references"


def documented() -> set[str]:
    """Every key the launch skill's references spell as YAML (`key:` at a line's start or inside `{...}`)."""
    text = "\n".join(p.read_text() for p in REFERENCES.glob("*.md"))
    return set(re.findall(r"(?m)^[\s#-]*([A-Za-z_]\w*):", text)) | set(re.findall(r"[{,]\s*([A-Za-z_]\w*):", text))


def keys(data, path: str = ""):
    if isinstance(data, dict):
        for key, value in data.items():
            yield f"{path}.{key}".lstrip("."), key
            yield from keys(value, f"{path}.{key}")
    elif isinstance(data, list):
        for item in data:
            yield from keys(item, f"{path}[]")


@pytest.mark.parametrize("init", [{}, {"profile": "llama-3-8b"}, {"runtime": "vllm"}],
                         ids=["default", "profile", "vllm"])
def test_every_key_init_writes_is_in_the_reference(init):
    missing = sorted(path for path, key in keys(local_fleet(2, **init)) if key not in documented())
    assert not missing, f"fleet-spec.md (or another launch reference) does not document: {missing}"


def test_every_field_of_the_spec_is_in_the_reference():
    models = [cls for mod in (settings, model) for cls in vars(mod).values()
              if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel) and cls.__module__ == mod.__name__]
    missing = sorted(f"{cls.__name__}.{f}" for cls in models for f in cls.model_fields if f not in documented())
    assert not missing, f"the launch skill's references do not document: {missing}"
