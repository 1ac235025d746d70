"""No function in `interop/` is longer than 80 lines: a decision that long hides its parts
(issue 49: `negotiate` was 216 lines; it is now its refusals, blockers and copy placement)."""

from __future__ import annotations

import ast
from pathlib import Path

import interop

LIMIT = 80
ROOT = Path(interop.__file__).parent


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (n lines)` of each function under `root` longer than `limit` lines,
    decorators left out, nested functions counted in their own right too."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    where = f"{path.relative_to(root).as_posix()}:{node.name}"
                    found.append(f"{where} at line {node.lineno} ({lines} lines)")
    return found


def test_no_function_in_interop_is_over_80_lines():
    too_long = long_functions(ROOT, LIMIT)
    assert not too_long, f"functions over {LIMIT} lines: " + "; ".join(too_long)


def test_the_walk_names_a_long_function_with_its_file_and_length(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))  # def line + 80 = 81 lines
    (tmp_path / "mod.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path, LIMIT) == ["mod.py:long at line 5 (81 lines)"]
    assert long_functions(tmp_path, LIMIT + 1) == []
