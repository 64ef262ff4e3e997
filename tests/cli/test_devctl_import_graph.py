"""devctl's modules import each other as a tree a reader can follow: no cycle, counting the
imports inside functions too (a lazy import is still a dependency), and no command module
imports another command module: what two commands share lives in a module below both.

The graph is read from the source with ``ast`` (nothing is imported), so a cycle is named even
where Python would resolve it at run time.
"""
from __future__ import annotations

import ast

from _support import ROOT

PACKAGE = ROOT / "devctl"


def _modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")}


def _targets(node: ast.AST, modules: set[str]) -> set[str]:
    """The devctl modules one import statement names (``__init__`` for the package itself)."""
    found: set[str] = set()
    if isinstance(node, ast.ImportFrom):
        if node.level == 1:
            base = node.module
        elif node.level == 0 and node.module and (node.module == "devctl" or node.module.startswith("devctl.")):
            base = node.module.partition(".")[2] or None
        else:
            return found
        if base:
            found.add(base.partition(".")[0])
        else:  # from . import x, y: a submodule, or a name of the package's __init__
            found |= {a.name if a.name in modules else "__init__" for a in node.names}
    elif isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "devctl":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name in sorted(modules):
        tree = ast.parse((PACKAGE / f"{name}.py").read_text(), filename=f"devctl/{name}.py")
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            for target in _targets(node, modules):
                if target != name:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; devctl is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for component in components:
        members, start = set(component), component[0]
        # the shortest way from start back to itself inside the component (breadth first)
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in previous:
                        previous[w] = v
                        following.append(w)
            frontier = following
        path, v = [start], previous[start]
        while v != start:
            path.append(v)
            v = previous[v]
        found.append([start] + path[:0:-1] + [start] if len(path) > 1 else [start, start])
    return found


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (devctl/{a}.py:{graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(cycle) + ": " + "; ".join(steps)


def command_modules() -> set[str]:
    """The modules main.COMMANDS loads a command from (the nouns), and main itself."""
    tree = ast.parse((PACKAGE / "main.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMMANDS" for t in node.targets):
            commands = ast.literal_eval(node.value)
            return {target.partition(":")[0] for target in commands.values()} | {"main"}
    raise AssertionError("devctl/main.py has no COMMANDS")


def test_the_graph_is_read():
    graph = import_graph()
    assert "errors" in graph["api"] and "settings" in graph["context"]
    assert "__init__" in graph["devserver"]  # from . import API_VERSION, GROUP


def test_cycles_are_found_and_named():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert _describe(["a", "b", "c", "a"], graph).startswith("a -> b -> c -> a: a (devctl/a.py:1) -> b")
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_devctl_imports_have_no_cycle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "devctl's modules import each other in a circle:\n" + "\n".join(
        _describe(c, graph) for c in found)


def test_command_modules_import_no_other_command_module():
    graph = import_graph()
    commands = command_modules()
    crossing = sorted(f"{a} -> {b} (devctl/{a}.py:{graph[a][b]})"
                      for a in commands for b in graph[a] if b in commands)
    assert not crossing, ("a command module imports another one; move what they share to a module below "
                          "both:\n" + "\n".join(crossing))
