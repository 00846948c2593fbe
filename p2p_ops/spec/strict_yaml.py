"""YAML as a fleet spec needs it: what the file says is what it means, or it is refused in one line.

PyYAML's SafeLoader keeps the last of two equal keys (a second `nodes:` silently drops the first), recurses once
per nesting level (1000 levels end in a RecursionError), expands aliases into structures far larger than the
file, reads `1:20` as 80 (YAML 1.1's base 60) and stops at Python's 4300-digit integer limit with a ValueError.
`load(text, source)` refuses each of these, naming the line (an integer too long to read becomes `HugeInt`, which
the field's validator refuses by name)::

    fleet.yaml: line 40: key 'nodes' appears twice in one mapping (first on line 12); keep one
"""

from __future__ import annotations

from typing import Any

import yaml

from p2p_ops.errors import BadInput

MAX_DEPTH = 32
# Nodes after expanding aliases: a fleet of 64 nodes with every section is a few thousand.
MAX_NODES = 200_000


class _Refusal(yaml.YAMLError):
    def __init__(self, mark: Any, message: str):
        super().__init__(message)
        self.problem_mark, self.problem = mark, message


class HugeInt:
    """An integer too long for Python to read from text; every field refuses it, naming itself."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refusal(mark, f"nested deeper than {MAX_DEPTH} levels; a fleet spec needs a handful")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` merges on purpose; its keys may be overridden
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
                seen[key] = key_node.start_mark.line + 1
            except TypeError:
                continue  # an unhashable key: SafeConstructor refuses it with its own message
            if first is not None:
                raise _Refusal(key_node.start_mark, f"key {key!r} appears twice in one mapping (first on line "
                                                    f"{first}); keep one")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | HugeInt:  # type: ignore[override]  # wider on purpose
        text = str(node.value)
        if ":" in text:
            raise _Refusal(node.start_mark, f"{text!r} is a YAML 1.1 sexagesimal (base 60) number, "
                                            f"{super().construct_yaml_int(node)}; quote it if you mean text")
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # past Python's int-from-text limit: no field takes it, the validator names the field
            return HugeInt(sum(c.isdigit() for c in text))

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        if ":" in str(node.value):
            raise _Refusal(node.start_mark, f"{node.value!r} is a YAML 1.1 sexagesimal (base 60) number; quote "
                                            "it if you mean text")
        return super().construct_yaml_float(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _expanded_size(root: yaml.Node) -> int:
    # Each shared node counted once per use.
    sizes: dict[int, int] = {}
    order, stack = [], [root]
    while stack:  # children before parents, each node once
        node = stack.pop()
        if id(node) in sizes:
            continue
        sizes[id(node)] = 0
        order.append(node)
        stack.extend(_children(node))
    for node in reversed(order):
        sizes[id(node)] = min(MAX_NODES + 1, 1 + sum(sizes[id(c)] for c in _children(node)))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load(text: str, source: str) -> Any:
    return _read(text, source, construct=True)


def compose(text: str, source: str) -> yaml.Node | None:
    """The document's node graph (each node with its line; an alias is the anchored node itself), under the
    same refusals as `load`: for readers of the text as written (the bundle's redaction)."""
    return _read(text, source, construct=False)


def _read(text: str, source: str, construct: bool) -> Any:
    loader = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_NODES:
            raise _Refusal(node.start_mark, f"expands to more than {MAX_NODES:,} values (aliases of aliases); "
                                            "too large for a fleet spec")
        return loader.construct_document(node) if construct else node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line, whatever YAML says
        raise BadInput(f"{source}:{where}: {problem}" if isinstance(exc, _Refusal)
                       else f"{source}:{where} is not valid YAML ({problem})") from None
    except (ValueError, OverflowError) as exc:
        # PyYAML's scanner passes an escape such as "\\U7fffffff" to chr() unguarded: not a YAMLError
        raise BadInput(f"{source} is not valid YAML (an escape names no character: {exc})") from None
    finally:
        if loader is not None:
            loader.dispose()
