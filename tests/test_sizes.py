"""The house's size rules, read from the source: no module in ragopt/ over 400 lines, no function over 60 (a
function's lines run from its `def`, decorators left out, to its last line, docstring and comments included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ragopt"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function or method in `source` longer than `limit` lines."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found.append((name, lines))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_long_functions_sees_methods_and_nested_functions() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = f"class A:\n    def short(self):\n        pass\n\n    def long(self):\n{body.replace('    ', '        ')}\n\n" \
             f"def outer():\n    def inner():\n{body.replace('    ', '        ')}\n    return inner\n"
    assert long_functions(source) == [("A.long", 61), ("outer", 63), ("outer.inner", 61)]
    assert long_functions(source, limit=100) == []


def test_no_module_over_400_lines() -> None:
    over = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines (split them by role): {over}"


def test_no_function_over_60_lines() -> None:
    over = [f"{p.relative_to(PACKAGE.parent)}:{name} ({n} lines)" for p in sorted(PACKAGE.rglob("*.py"))
            for name, n in long_functions(p.read_text(encoding="utf-8"))]
    assert over == [], f"functions over {MAX_FUNCTION_LINES} lines (split them): {over}"
