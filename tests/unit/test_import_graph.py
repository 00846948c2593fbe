"""No import cycle anywhere in p2p_ops and p2p_runtime, counting imports made inside functions.

The import-linter contracts in pyproject.toml (`lint-imports`) hold the layering and forbid cycles between the
siblings of a package; they cannot see a package's `__init__` in a cycle with its own children. This test
looks at single modules: it builds grimp's graph (which records every import statement, lazy ones included)
and names each strongly connected component, so a cycle cannot hide behind a function-level import.
"""

from __future__ import annotations

import textwrap

import grimp

PACKAGES = ("p2p_ops", "p2p_runtime")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    """One cycle with the import lines that close it, so the message says where to cut."""
    members = set(component)
    edges = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            details = graph.get_import_details(importer=importer, imported=imported)
            lines = ", ".join(f"l.{d['line_number']}" for d in details)
            edges.append(f"    {importer} -> {imported} ({lines})")
    return " <-> ".join(component) + ":\n" + "\n".join(edges)


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES)
    cycles = import_cycles(graph)
    assert not cycles, ("import cycles (move the shared piece into a module both import):\n"
                        + "\n".join(describe(graph, c) for c in cycles))


def test_a_cycle_through_a_function_level_import_or_an_init_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import cyclepkg.b\n")
    (pkg / "b.py").write_text(textwrap.dedent("""
        def late():
            from cyclepkg import a  # hidden in a function: still an edge
            return a
    """))
    (pkg / "sub" / "__init__.py").write_text("from cyclepkg.sub import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("import cyclepkg.sub\n")
    (pkg / "fine.py").write_text("import cyclepkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclepkg", cache_dir=None)
    assert import_cycles(graph) == [["cyclepkg.a", "cyclepkg.b"], ["cyclepkg.sub", "cyclepkg.sub.leaf"]]
    assert "cyclepkg.b -> cyclepkg.a (l.3)" in describe(graph, ["cyclepkg.a", "cyclepkg.b"])


def unresolved_names(roots: tuple[str, ...] = (*PACKAGES, "bench")) -> list[str]:
    """Every `from <our module> import NAME` in the tree, lazy ones included, whose NAME the module lacks: a lazy
    import that names a removed constant fails only when its branch runs (bench-ci's Mooncake column did)."""
    import ast
    import importlib
    from pathlib import Path

    from p2p_ops.resources import CHECKOUT

    missing = []
    for root in roots:
        for path in sorted((CHECKOUT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                        and node.module.split(".")[0] in roots):
                    continue
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if alias.name != "*" and not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ImportError:
                            missing.append(f"{Path(path).relative_to(CHECKOUT)}:{node.lineno}: "
                                           f"{node.module} has no {alias.name}")
    return missing


def test_every_import_of_our_own_modules_names_something_they_define():
    assert unresolved_names() == []
