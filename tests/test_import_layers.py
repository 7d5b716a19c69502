"""The house's import rules, read from the source: no import cycle between ragopt's modules, and lower rooms never
import higher ones (docs: ARCHITECTURE's "types <- ... <- plan <- eval/serve <- cli"). Every import statement counts:
the lazy ones inside functions, and those under `if TYPE_CHECKING:` (an annotation naming a higher room is a
dependency on it too)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ragopt"

# Top to bottom. A module may import its own room and any room below it, never one above; two rooms on one line
# are independent of each other. A room is ragopt's first-level module or package.
LAYERS = [
    {"__main__"},
    {"cli"},
    {"serve", "synth"},
    {"observe"},  # exporters of eval's results and the traces; imported only when an export is switched on
    {"eval"},
    {"judge"},
    {"train", "interop"},
    {"plan"},
    {"stages"},
    {"index", "memo", "fusion"},
    {"index_update"},  # the in-place update of a qdrant-edge index, which ragopt/index/build.py calls
    {"tokencount"},
    {"chunking"},  # the chunkers count tokens and embed sentences (semantic) with the backends below
    {"backends"},
    {"__init__"},  # ragopt/__init__.py: the core re-exported for users, and __version__
    {"documents"},
    {"data", "resources", "cache", "gguf_meta", "pipeline", "text", "workspace"},
    {"capacity", "trace", "permissions", "shipped", "progress"},
    {"config", "types"},
    {"errors"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("ragopt", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
        return [f"{base}.{a.name}" for a in node.names] + [base]
    return []


@cache
def import_graph() -> dict[str, set[str]]:
    """module -> the ragopt modules it imports (`from ragopt.x import name` is an edge to ragopt.x, or to
    ragopt.x.name when that is a module)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            names = _imported(node, package)
            if isinstance(node, ast.ImportFrom):  # "from a.b import c": a.b.c when it is a module, else a.b
                names = [n for n in names[:-1] if n in modules] or names[-1:]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name.startswith("ragopt") and name != module:
                    graph[module].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_graph_sees_lazy_and_annotation_only_imports() -> None:
    graph = import_graph()
    assert "ragopt.gguf_meta" in graph["ragopt.stages.generate"]  # imported inside _check()
    assert "ragopt.index" in graph["ragopt.stages.spec"]  # under TYPE_CHECKING only
    assert "ragopt.backends.bm25" in graph["ragopt.index.opened"]


def test_cycles_finds_a_circle_and_nothing_in_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_every_room_has_a_layer() -> None:
    placed = set().union(*LAYERS)
    rooms = {_room(m) for m in import_graph()}
    assert rooms <= placed, f"rooms in no layer of LAYERS (add them where they belong): {sorted(rooms - placed)}"


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_no_room_imports_a_higher_or_sibling_room(layer: int) -> None:
    rank = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    upward = sorted(
        f"{a} -> {b}" for a, targets in import_graph().items() if rank.get(_room(a)) == layer
        for b in targets if _room(b) != _room(a) and rank.get(_room(b), -1) <= layer
    )
    assert upward == []


def test_serve_opens_what_it_serves_through_the_plan() -> None:
    """serve builds no index and loads no documents, embedder or stage itself: plan/ hands it the pipeline and its
    resources (ragopt.plan.serving.open_service_plan), as it hands the sweep its trials."""
    below = ("ragopt.index", "ragopt.backends.embeddings", "ragopt.documents", "ragopt.stages")
    found = sorted(f"{a} -> {b}" for a, targets in import_graph().items() if _room(a) == "serve"
                   for b in targets if any(b == m or b.startswith(f"{m}.") for m in below))
    assert found == []
