"""The core's modules form layers: no circle of imports among them (imports inside functions
and under TYPE_CHECKING included), and none imports a framework by name.

Edges are the modules an import statement names (`from . import x` names interop.x); the
parent packages Python imports on the way are not edges of their own, or every package that
re-exports its submodules (as `interop/__init__.py` does) would be a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "interop"
FRAMEWORKS = {"numpy", "torch", "jax", "jaxlib", "tensorflow", "mxnet", "cupy", "paddle", "mlx"}
FRAMEWORKS |= {"pyarrow", "ml_dtypes"}
#: modules that import a framework by name today, and why; the list only shrinks
FRAMEWORK_IMPORTS_LEFT = {
    # the conformance kit plugins run: its reference sums are NumPy's, on purpose
    "interop.testing.reference": {"numpy", "ml_dtypes"},
    # users' cross-framework comparisons: both sides are read into NumPy on the host, the one
    # array every framework reaches (imported inside the functions that compare)
    "interop.testing.compare": {"numpy"},
    "interop.testing.frameworks": {"numpy", "ml_dtypes"},
}


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every absolute module name an import statement in `path` names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            subs = [f"{base}.{alias.name}" for alias in node.names]
            named = [s for s in subs if s in known]
            found.update(named)
            if len(named) < len(subs):  # names from the module itself
                found.add(base)
    return found


def graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between the package's modules, every top-level package each one imports)."""
    known = module_names(root)
    edges, external = {}, {}
    for name, path in known.items():
        named = imports(name, path, known)
        edges[name] = {n for n in named if n in known and n != name}
        external[name] = {n.partition(".")[0] for n in named if n not in known}
    return edges, external


def a_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, as the modules in order, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_no_circle_of_imports_among_the_cores_modules():
    edges, _ = graph(ROOT)
    assert len(edges) > 30  # (the walk found the package)
    circle = a_circle(edges)
    assert circle is None, "a circle of imports: " + " -> ".join(circle or [])


def test_no_core_module_imports_a_framework_by_name():
    _, external = graph(ROOT)
    found = {m: names & FRAMEWORKS for m, names in external.items() if names & FRAMEWORKS}
    assert found == FRAMEWORK_IMPORTS_LEFT


def test_the_checks_see_circles_and_imports_inside_functions(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import low\n")
    (package / "low.py").write_text("def f():\n    from .high import g\n    import torch\n")
    (package / "high.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .low import f\n"
    )
    edges, external = graph(package)
    assert a_circle(edges) in (
        ["pkg.high", "pkg.low", "pkg.high"],
        ["pkg.low", "pkg.high", "pkg.low"],
    )
    assert external["pkg.low"] == {"torch"}
    (package / "high.py").write_text("x = 1\n")
    assert a_circle(graph(package)[0]) is None


#: the only modules that see the accelerator itself: its loader, the choice of each hub's
#: fast-path twin, the choice of the process's release runtime, and `accelerated()`'s words
SEES_THE_ACCELERATOR = {"interop.fastpath", "interop.capsule", "interop.api"}


def test_one_seam_chooses_between_the_compiled_and_pure_twins():
    # every other module goes through a FastPath or the release runtime, never branching on
    # whether the accelerator is built
    edges, _ = graph(ROOT)
    seeing = {m for m, named in edges.items() if "interop.speedups" in named}
    assert seeing == SEES_THE_ACCELERATOR
    branching = {
        name
        for name, path in module_names(ROOT).items()
        if "SPEEDUPS" in path.read_text() and name != "interop.speedups"
    }
    assert branching <= SEES_THE_ACCELERATOR - {"interop.api"}


@pytest.mark.parametrize("name", sorted(FRAMEWORK_IMPORTS_LEFT))
def test_each_module_left_importing_a_framework_still_does(name):
    # (a stale entry would let a new framework import hide behind it)
    _, external = graph(ROOT)
    assert external[name] & FRAMEWORKS == FRAMEWORK_IMPORTS_LEFT[name]


BLOCKED_FRAMEWORKS = """
import importlib.abc, sys

BLOCKED = {blocked!r}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked")
        return None


sys.meta_path.insert(0, Refuse())
import interop
from interop.cli import main
from interop.testing.counting import counting_capsule

capsule, _ = counting_capsule(bytes(48), "float32", (3, 4))
print("inspect:", interop.inspect(capsule))
refused = interop.explain(capsule, "torch").error
assert isinstance(refused, interop.FrameworkNotInstalledError), refused
print("explain:", refused)
main(["list"])
print("imported:", sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED))
"""


def test_the_core_works_with_every_framework_import_refused():
    import subprocess
    import sys

    code = BLOCKED_FRAMEWORKS.format(blocked=sorted(FRAMEWORKS))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "inspect: DLPack capsule tensor float32[3, 4] on cpu" in out, out
    assert "explain: cannot convert to torch: torch is not installed" in out, out
    listed = {line.split()[0]: line for line in out.splitlines() if line[:1].isalpha()}
    assert "loaded" in listed["numpy"] and "not installed" in listed["numpy"], out
    assert out.strip().splitlines()[-1] == "imported: []", out
