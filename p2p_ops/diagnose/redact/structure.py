"""A YAML (or JSON) document, fleet.yaml, redacted from its parsed structure, so no layout hides a value."""

from __future__ import annotations

import re

import yaml

from p2p_ops.diagnose.redact import MASK, Redaction, RedactionResult, redact_text
from p2p_ops.diagnose.redact.rules import harmless
from p2p_ops.facts.secret_names import is_secret_name

_STR = "tag:yaml.org,2002:str"
_FLAG = re.compile(r"--([A-Za-z0-9][\w-]*)")


def redact_structure(text: str, where: str) -> RedactionResult:
    """A YAML (or JSON) document redacted from its parsed structure and written back from it: every value under
    a secret name in any layout (on the next line, after a comment, folded over lines, under a `? key`, in JSON
    flow, an alias of a value anchored elsewhere), the item after a secret-named flag in a list (an argv:
    `vllm.args: ["--hf-token", S]`) and whatever `redact_text` finds in any other value. Comments and layout are
    not kept (a comment can hold a secret too). Not YAML: BadInput, and nothing of it is copied."""
    from p2p_ops.spec.strict_yaml import compose

    root = compose(text, where)
    result = RedactionResult("", [])
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            found = redact_text(node.value, where)
            if found.redactions:
                _set(node, found.text)
                result.values.update(found.values)
                result.redactions += [Redaction(r.kind, where, node.start_mark.line + r.line, r.name)
                                      for r in found.redactions]
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else ""
                if is_secret_name(name):
                    _mask_values(value, name, where, result)
                stack += [key, value]
        else:
            for flag, value in zip(node.value, node.value[1:]):
                if isinstance(flag, yaml.ScalarNode) and (m := _FLAG.fullmatch(flag.value)) and is_secret_name(m[1]):
                    _mask_values(value, m[1], where, result)
            stack += node.value
    header = "# written back from the parsed spec with its secrets masked; comments and layout are not kept\n"
    result.text = header + (yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True) if root else "")
    return result


def _mask_values(node: yaml.Node, name: str, where: str, result: RedactionResult) -> None:
    """Every scalar value under a secret name (a mapping's keys stay: they name, they do not unlock)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode) and not harmless(name, node.value):
            result.values[node.value] = name
            result.redactions.append(Redaction("secret_field", where, node.start_mark.line + 1, name))
            _set(node, MASK)
        elif isinstance(node, yaml.MappingNode):
            stack += [value for _, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def _set(node: yaml.ScalarNode, value: str) -> None:
    node.value, node.tag, node.style = value, _STR, None  # a masked 1234 is text now, not an int


