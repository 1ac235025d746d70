"""One context: the registry, the hub and the calls made through it are built in one place
(`interop.api`) and passed, never assigned into another module; tree, gradient and sharding
calls made through a hub use that hub's registry and conversions, not the default ones."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from test_sharding import PLUGIN_WITH_SHARDS

ROOT = Path(__file__).resolve().parent.parent / "interop"

#: assignments into another module's object that stay, and why (this list only shrinks)
ALLOWED = {
    # importlib's recipe for loading a module from a file: the interpreter's import table
    ("testing/isolation.py", "sys.modules[module_name]"): "the import protocol itself",
}


def _imported(tree: ast.AST) -> set[str]:
    """The names a module binds by importing: modules, and classes or objects of others."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(target: ast.expr) -> ast.expr:
    """The name an attribute or item target hangs from (`a` of `a.b[c].d`); a call's result
    (`f().x`) is an object of its own, not the module's."""
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        target = target.value
    return target


def writes_into_other_modules(source: str) -> list[str]:
    """Every `X.attr = ...` (or `X[k] = ...`, `del X.attr`, `setattr(X, ...)`) in `source`
    whose X is an imported module, class or object: a global of another module changed from
    outside it."""
    tree = ast.parse(source)
    imported = _imported(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [t for each in node.targets for t in _flat(each)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            targets = [ast.Attribute(node.args[0], "?")]
        else:
            continue
        for target in targets:
            if not isinstance(target, (ast.Attribute, ast.Subscript)):
                continue
            root = _root(target)
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(ast.unparse(target))
    return found


def _flat(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for each in target.elts for t in _flat(each)]
    return [target]


def test_no_module_assigns_into_another_modules_objects() -> None:
    found = {
        (str(path.relative_to(ROOT)), target): None
        for path in sorted(ROOT.rglob("*.py"))
        for target in writes_into_other_modules(path.read_text())
    }
    assert len(list(ROOT.rglob("*.py"))) > 30  # (the walk found the package)
    assert set(found) == set(ALLOWED), sorted(set(found) ^ set(ALLOWED))


def test_the_scan_sees_the_assignments_it_forbids() -> None:
    code = (
        "import os\nfrom .engine import Hub\nfrom . import capsule as cap\n"
        "from .sharding import kinds\n"
        "Hub.structure_error = staticmethod(f)\n"  # a class of another module
        "cap.RELEASES.find_boxes = g\n"  # an object another module holds
        "kinds.PER_TENSOR, x = 1, 2\n"  # a global of another module, in a tuple
        "setattr(Hub, 'y', 1)\n"
        "os.environ['A'] = '1'\n"
        "hub = Hub()\nhub.plans = {}\n"  # an object of its own: fine
        "cap.managed(1, True).deleter = 0\n"  # a call's result (a C struct): fine
    )
    assert sorted(writes_into_other_modules(code)) == [
        "Hub.?",
        "Hub.structure_error",
        "cap.RELEASES.find_boxes",
        "kinds.PER_TENSOR",
        "os.environ['A']",
    ]


# --- a hub over another registry governs every call made through it ---------------------------
#: a framework only a plugin knows ("toyfw"), whose arrays are sharded: test_sharding's, up to
#: where it registers it into the default registry
TOY = PLUGIN_WITH_SHARDS.split("interop.register(Toy())")[0]


@pytest.fixture(scope="module")
def toy() -> dict[str, Any]:
    pytest.importorskip("numpy")
    from interop_numpy import NumpyAdapter

    from interop.grad import Source, Target
    from interop.roles import Gradients

    space: dict[str, Any] = {}
    exec(compile(TOY, "toy", "exec"), space)
    seen: list[Any] = []
    asked: list[str] = []

    class CountingSource(Source):
        name = "counting"

    class CountingTarget(Target):
        name = "counting"

    class Counting(NumpyAdapter, Gradients):
        """NumPy's adapter under another name, owning no type: every tensor converted into it
        is imported by `from_dlpack`, which counts them."""

        name, aliases = "counting", ()

        def tensor_types(self) -> tuple[type, ...]:
            return ()

        def importer(self, as_object: bool, dtype: str) -> Any:
            return None  # (no fast importer: every import is counted below)

        def from_dlpack(self, source: Any) -> Any:
            result = super().from_dlpack(source)
            seen.append(result)
            return result

        def grad_source(self) -> Source:
            asked.append("source")
            return CountingSource()

        def grad_target(self) -> Target:
            asked.append("target")
            return CountingTarget()

    return {"Counting": Counting, "seen": seen, "asked": asked, **space}


@pytest.fixture(params=[False, None], ids=["pure", "default"])
def hub(request: pytest.FixtureRequest, toy: dict[str, Any]) -> Any:
    from interop.engine import Hub
    from interop.registry import Registry

    registry = Registry()
    registry.register(toy["Counting"]())
    registry.register(toy["Toy"]())
    toy["seen"].clear()
    toy["asked"].clear()
    return Hub(registry, compiled=request.param)


def test_convert_tree_and_explain_tree_go_through_the_hub_given(hub: Any, toy: Any) -> None:
    import numpy as np

    import interop

    a, b = np.arange(4.0), np.arange(6, dtype=np.int32)
    tree = {"a": a, "rest": [b, "name", 3]}
    out = interop.convert_tree(tree, "counting", hub=hub)
    assert [x is y for x, y in zip(toy["seen"], (out["a"], out["rest"][0]), strict=True)] == [
        True,
        True,
    ]
    assert np.shares_memory(out["a"], a) and out["rest"][1:] == ["name", 3]
    assert (out["rest"][0] == b).all()
    plan = interop.explain_tree(tree, "counting", hub=hub)
    assert plan.target == "counting" and [leaf.status for leaf in plan] == [
        "shared",
        "shared",
        "kept",
        "kept",
    ]
    with pytest.raises(interop.UnknownFrameworkError, match="counting"):
        interop.convert_tree(tree, "counting")  # the default hub's registry has no such adapter
    with pytest.raises(interop.UnknownFrameworkError, match="counting"):
        interop.explain_tree(tree, "counting")


def test_a_sharded_conversion_goes_through_the_hub_given(hub: Any, toy: Any) -> None:
    import numpy as np

    import interop
    from interop.sharding import convert_sharded, explain_sharded, is_sharded

    halves = [np.arange(2.0), np.arange(2.0, 4.0)]
    x = toy["Spread"](halves)
    assert is_sharded(x, hub=hub) and not is_sharded(x)  # the default registry has no toyfw
    out = convert_sharded(x, "counting", hub=hub)
    assert type(out).__name__ == "LocalShards" and out.framework == "counting"
    assert [s.data is c for s, c in zip(out, toy["seen"], strict=True)] == [True, True]
    assert all(np.shares_memory(s.data, h) for s, h in zip(out, halves, strict=True))
    plan = explain_sharded(x, "counting", hub=hub)
    assert plan is not None and [s.plan.target for s in plan.shards] == ["counting"] * 2
    tree = interop.convert_tree({"x": x}, "counting", hub=hub)  # a sharded leaf of a tree
    assert type(tree["x"]).__name__ == "LocalShards" and len(toy["seen"]) == 4
    assert interop.convert_tree({"x": x}, "numpy")["x"] is x  # not a tensor to the default hub
    assert convert_sharded(x, "counting") is None  # not a sharded array to the default hub
    with pytest.raises(interop.UnsupportedTensorError):
        interop.convert(x, "numpy")


def test_wrap_finds_the_frameworks_in_the_hubs_registry(hub: Any, toy: Any) -> None:
    import interop

    def fn(x: Any) -> Any:
        return x

    assert interop.wrap(fn, "counting", "counting", hub=hub) is fn
    assert toy["asked"] == ["source", "target"]
    with pytest.raises(interop.UnknownFrameworkError, match="wrap: the source must be one of"):
        interop.wrap(fn, "counting", "counting")


def test_the_default_hubs_structure_error_is_given_at_construction() -> None:
    pytest.importorskip("numpy")
    import numpy as np

    import interop
    from interop.api import HUB
    from interop.engine import Hub

    tree = {"w": np.ones(2)}
    with pytest.raises(interop.UnsupportedTensorError, match="use interop.convert_tree"):
        interop.convert(tree, "numpy")
    with pytest.raises(interop.UnsupportedTensorError) as plain:
        Hub(HUB.registry).convert(tree, "numpy", None, None, None)
    assert "convert_tree" not in str(plain.value)  # a hub built without one: a plain refusal
    said = Hub(HUB.registry, structure_error=lambda x: interop.UnsupportedTensorError("mine"))
    with pytest.raises(interop.UnsupportedTensorError, match="^mine$"):
        said.convert(tree, "numpy", None, None, None)


# --- a wrap made through a hub moves every tensor through it -----------------------------------
@pytest.fixture(params=[False, None], ids=["pure", "default"])
def counted_hub(request: pytest.FixtureRequest) -> tuple[Any, list[str], bool | None]:
    """A hub over a registry of NumPy's, torch's and JAX's adapters whose imports are counted
    (the warm path's importers and the full path's `from_dlpack`)."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from interop_jax import JaxAdapter
    from interop_numpy import NumpyAdapter
    from interop_torch import TorchAdapter

    from interop.engine import Hub
    from interop.registry import Registry

    imported: list[str] = []

    def counted(base: type) -> Any:
        class Counted(base):  # type: ignore[misc, valid-type]
            def importer(self, as_object: bool, dtype: str) -> Any:
                found = super().importer(as_object, dtype)
                if found is None:
                    return None

                def counting(source: Any) -> Any:
                    imported.append(self.name)
                    return found(source)

                return counting

            def from_dlpack(self, source: Any) -> Any:
                result = super().from_dlpack(source)
                imported.append(self.name)
                return result

        return Counted()

    registry = Registry()
    for base in (NumpyAdapter, TorchAdapter, JaxAdapter):
        registry.register(counted(base), replace=True)
    return Hub(registry, compiled=request.param), imported, request.param


def test_a_wrap_moves_its_tensors_through_the_hub_given(
    counted_hub: tuple[Any, list[str], bool | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    import jax.numpy as jnp
    import torch

    import interop
    from interop import api
    from interop.speedups import SPEEDUPS

    hub, imported, compiled = counted_hub
    default: list[Any] = []
    real = api.convert

    def spy(x: Any, to: Any, **options: Any) -> Any:
        default.append(to)
        return real(x, to, **options)

    monkeypatch.setattr(api, "convert", spy)  # every move through the default hub
    learned = {kind: set(routes) for kind, routes in api.HUB.routes.table.items()}
    f = interop.wrap(lambda x, w: jnp.tanh(x @ w).sum(), "jax", "torch", hub=hub)
    x = torch.randn(4, 3)
    w = torch.randn(3, 2, requires_grad=True)
    w0 = w.detach().requires_grad_(True)
    expected = torch.tanh(x @ w0).sum()
    expected.backward()
    for step in range(2):  # the second step takes the routes the first taught the hub
        del imported[:]
        w.grad = None
        loss = f(x, w)
        forward = list(imported)
        loss.backward()
        backward = imported[len(forward) :]
        # inputs and cotangents cross into JAX as NumPy views, results come back into torch
        # (on warm routes the compiled twin may import into torch by its exchange API instead)
        assert {"numpy"} <= set(forward) <= {"numpy", "torch"}, (step, forward)
        assert {"numpy"} <= set(backward) <= {"numpy", "torch"}, (step, backward)
        assert step or ("torch" in forward and "torch" in backward)
        assert torch.allclose(loss.detach(), expected.detach(), atol=1e-5)
        assert w.grad is not None and torch.allclose(w.grad, w0.grad, atol=1e-5)
    assert default == []
    assert {kind: set(routes) for kind, routes in api.HUB.routes.table.items()} == learned
    # the hub's own twin (Hub(compiled=False): the pure one) built the routes the moves took
    routes = [hub.routes.table[torch.Tensor]["numpy"], hub.routes.table[type(jnp.ones(1))]["torch"]]
    twins = {type(route).__module__ == "interop._speedups" for route in routes}
    assert twins == {compiled is not False and SPEEDUPS is not None}
