"""The package's shape that issue 46 asked for and the redesign keeps: small modules and imports that run one way."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import phaze

PHAZE = Path(phaze.__file__).parent
MAX_LINES = 400
"""No module of phaze/ over 400 lines (issue 46, Must show)."""


def modules() -> dict[str, Path]:
    out = {}
    for m in pkgutil.walk_packages([str(PHAZE)], prefix="phaze."):
        path = PHAZE.joinpath(*m.name.split(".")[1:])
        out[m.name] = path / "__init__.py" if m.ispkg else path.with_suffix(".py")
    return out


def top_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The phaze modules `name` imports when it is imported (module-level statements only: an import inside a function
    runs later, when the importer is loaded)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.parse(path.read_text()).body:
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        out.update(t for t in targets if t in known and t != name)
    return out


def test_no_module_of_phaze_is_over_400_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def circles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles a depth-first walk of `graph` (module -> the modules it imports) meets."""
    state, circles = {}, []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                path = trail + [node]
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [node])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return circles


def test_a_circle_is_found_where_there_is_one():
    assert circles_of({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles_of({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_imports_between_phaze_modules_have_no_circle():
    found = modules()
    graph = {name: top_level_imports(name, path, set(found)) for name, path in found.items()}
    assert "phaze.evaluation.point" in graph["phaze.pipeline"] and "phaze.search.spec" in graph["phaze.config"]
    assert circles_of(graph) == []
