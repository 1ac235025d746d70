"""torch for `interop.wrap` (`TorchAdapter.grad_source()` / `grad_target()`).

- As a source: the function runs on copies of its inputs (it may write into them), its reverse
  rule is `torch.autograd.grad`, and shapes are found ahead with fake tensors.
- As a target: a `torch.autograd.Function`; its backward is the bridged reverse rule, recorded
  by torch when `create_graph=True` (higher orders), the saved pullback otherwise. Under
  `torch.compile` (fullgraph too) each bridge is a torch custom operator instead (see below).

Imported only when `interop.wrap` names torch; torch itself only once a wrapped function runs.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from interop.grad import (
    UNCHANGED,
    BridgedFunction,
    Flat,
    Pullback,
    Source,
    Target,
    TensorSpec,
    UnsupportedTransformError,
    convert,
    dtype_name,
    framework,
)


class TorchSource(Source):
    """torch tensors are writable: `fn` gets its own copies (`clone`), so a function that
    writes into its inputs never reaches the caller's memory (a TF constant or JAX buffer
    shared zero-copy), and it may write into them even while gradients are recorded. Inputs
    the bridge owns (private copies) are not copied again, except those gradients are recorded
    for: torch refuses in-place writes into the leaves of its graph."""

    name = "torch"

    def tensor_types(self) -> tuple[type, ...]:
        torch = framework("torch")

        return (torch.Tensor,)

    def threads(self, count: int) -> contextlib.AbstractContextManager[None]:
        torch = framework("torch")

        if count <= 0 or count == torch.get_num_threads():
            return UNCHANGED
        return _threads(torch, count)

    def give(self, y: Any, to: str) -> Any:
        y = y.detach()
        if y.is_conj():  # torch's exports drop the lazy conj and neg bits: resolve them
            y = y.resolve_conj()
        if y.is_neg():
            y = y.resolve_neg()
        return convert(y, to)

    def call(self, fn: Flat, xs: list[Any], owned: bool = False) -> list[Any]:
        torch = framework("torch")

        with torch.no_grad():
            return fn(xs if owned else [x.clone() for x in xs])

    def forward(
        self,
        fn: Flat,
        xs: list[Any],
        diff: list[bool],
        out_diff: list[bool] | None,
        conj: bool,
        owned: bool = False,
    ) -> tuple[list[Any], Pullback]:
        torch = framework("torch")

        leaves = [x.detach().requires_grad_(d) for x, d in zip(xs, diff, strict=True)]
        with torch.enable_grad():
            ys = fn([x.clone() if d or not owned else x for x, d in zip(leaves, diff, strict=True)])
        inputs = [x for x, d in zip(leaves, diff, strict=True) if d]

        def pullback(cts: list[Any]) -> list[Any]:
            return _torch_grads(ys, inputs, cts, conj, create_graph=False)

        return ys, pullback

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        torch = framework("torch")

        n = len(diff)

        def vjp(args: list[Any]) -> list[Any]:
            xs, cts = args[:n], list(args[n:])
            deeper = any(a.requires_grad for a in args)  # being differentiated itself
            leaves = [
                x if x.requires_grad or not d else x.detach().requires_grad_(True)
                for x, d in zip(xs, diff, strict=True)
            ]
            with torch.enable_grad():
                ys = fn([x.clone() for x in leaves])
                inputs = [x for x, d in zip(leaves, diff, strict=True) if d]
                return _torch_grads(ys, inputs, cts, conj, create_graph=deeper)

        return vjp

    def out_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        torch = framework("torch")

        try:
            with warnings.catch_warnings():  # its first import warns about torch.jit.script
                warnings.simplefilter("ignore", DeprecationWarning)
                fake_mode = framework("torch._subclasses.fake_tensor").FakeTensorMode
        except (ImportError, AttributeError):  # pragma: no cover - older torch: meta tensors
            return self._meta_specs(fn, specs)
        with fake_mode(), torch.no_grad():
            xs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in specs]
            ys = fn(xs)
            return [TensorSpec(tuple(y.shape), self.dtype(y)) for y in ys]

    def _meta_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        torch = framework("torch")

        with torch.no_grad():
            xs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta") for s in specs]
            return [TensorSpec(tuple(y.shape), self.dtype(y)) for y in fn(xs)]


@contextlib.contextmanager
def _threads(torch: Any, count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _differentiable(ys: list[Any]) -> list[Any]:
    return [y for y in ys if y.is_floating_point() or y.is_complex()]


def _torch_grads(
    ys: list[Any], inputs: list[Any], cts: list[Any], conj: bool, create_graph: bool
) -> list[Any]:
    """Gradients of `inputs` for cotangents of the differentiable outputs, zeros where unused."""
    torch = framework("torch")

    pairs = [
        (y, torch.conj_physical(c) if conj and c.is_complex() else c)
        for y, c in zip(_differentiable(ys), cts, strict=True)
        if y.requires_grad
    ]
    if pairs and inputs:
        found = torch.autograd.grad(
            [y for y, _ in pairs],
            inputs,
            [c for _, c in pairs],
            retain_graph=True,
            create_graph=create_graph,
            allow_unused=True,
        )
    else:
        found = [None] * len(inputs)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, found, strict=True)]
    return [torch.conj_physical(g) if conj and g.is_complex() else g for g in grads]


def _held(value: Any) -> Any:
    """A non-tensor output of a torch Function: carries the pullback to the context."""
    return (value,)


def _values(xs: Any) -> list[Any]:
    """The tensors' values, detached where they require grad: the bridge hands them to the
    other framework, which `convert` refuses for such tensors (this Function carries their
    gradients; a detached tensor shares their memory and version counter)."""
    return [x.detach() if x.requires_grad else x for x in xs]


def _torch_forward(bridge: BridgedFunction, record: bool, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    if record:
        ys, pull = bridge.forward(_values(xs))
    else:
        ys, pull = bridge.run(_values(xs)), None
    return (*ys, _held(pull))


def _torch_save(
    ctx: Any, bridge: BridgedFunction, xs: tuple[Any, ...], output: tuple[Any, ...]
) -> None:
    ys = output[:-1]
    ctx.bridge, ctx.pull, ctx.count = bridge, output[-1][0], len(xs)
    # Saved tensors carry torch's version check: an input or output changed in place before
    # backward is refused as natively (the source may hold them as residuals, shared).
    ctx.save_for_backward(*xs, *ys)
    ctx.mark_non_differentiable(*[y for y, d in zip(ys, bridge.out_diff, strict=True) if not d])


def _torch_backward(function: Any, ctx: Any, cts: tuple[Any, ...]) -> tuple[Any, ...]:
    torch = framework("torch")
    saved = ctx.saved_tensors
    xs, ys, bridge = list(saved[: ctx.count]), saved[ctx.count :], ctx.bridge
    cts_d = [
        torch.zeros_like(y) if c is None else c
        for y, c, d in zip(ys, cts[:-1], bridge.out_diff, strict=True)
        if d
    ]
    if torch.is_grad_enabled():  # create_graph=True: the rule itself is recorded
        args = [*xs, *cts_d]
        record = any(a.requires_grad for a in args)
        grads = list(function.apply(bridge.backward(), record, *args)[:-1])
    elif ctx.pull is not None:
        grads = ctx.pull(cts_d)
    else:
        grads = bridge.backward().run(_values([*xs, *cts_d]))
    found = iter(grads)
    out: list[Any] = [None, None]
    for d, need in zip(bridge.diff, ctx.needs_input_grad[2:], strict=True):
        grad = next(found) if d else None
        out.append(grad if need else None)
    return tuple(out)


FORWARD_MODE = (
    "forward-mode autodiff (torch.autograd.forward_ad, torch.func.jvp/jacfwd) cannot go through "
    "a function bridged from another framework: only reverse mode is carried (use "
    "torch.autograd.grad, torch.func.jacrev)"
)

_TORCH_FUNCTIONS: tuple[Any, Any] | None = None


def _torch_functions() -> tuple[Any, Any]:
    """Two `torch.autograd.Function`s with one rule. torch binds the arguments of Functions
    that define `setup_context` through `inspect.signature` on every call (40 µs measured), so
    the plain one serves every call made outside torch.func's transforms; those need
    `setup_context`, and get the second (which refuses vmap with a typed error)."""
    global _TORCH_FUNCTIONS
    if _TORCH_FUNCTIONS is not None:
        return _TORCH_FUNCTIONS
    torch = framework("torch")

    class Bridged(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(ctx: Any, bridge: BridgedFunction, record: bool, *xs: Any) -> Any:
            output = _torch_forward(bridge, record, xs)
            _torch_save(ctx, bridge, xs, output)
            return output

        @staticmethod
        def backward(ctx: Any, *cts: Any) -> Any:
            return _torch_backward(Bridged, ctx, cts)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            raise UnsupportedTransformError(FORWARD_MODE)

    class BridgedForTransforms(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(bridge: BridgedFunction, record: bool, *xs: Any) -> Any:
            return _torch_forward(bridge, record, xs)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            _torch_save(ctx, inputs[0], inputs[2:], output)

        @staticmethod
        def backward(ctx: Any, *cts: Any) -> Any:
            return _torch_backward(BridgedForTransforms, ctx, cts)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            raise UnsupportedTransformError(FORWARD_MODE)

        @staticmethod
        def vmap(info: Any, in_dims: Any, *args: Any) -> Any:
            raise UnsupportedTransformError(
                "torch.func.vmap (and jacrev/jacfwd/hessian, which vmap) cannot batch a "
                "function bridged from another framework; batch inside it, or loop"
            )

    _TORCH_FUNCTIONS = (Bridged, BridgedForTransforms)
    return _TORCH_FUNCTIONS


# -- torch.compile: each bridge is a torch custom operator ------------------------------------
# Dynamo cannot trace the bridge (it runs another framework), nor build operators itself. So
# under torch.compile a wrapped call goes to one function that Dynamo leaves to AOTAutograd's
# non-strict tracing (`torch._dynamo.nonstrict_trace`); there the bridge is found or built as in
# eager, and called as its own custom operator: a fake kernel from the outputs' specs (found
# without data, or out_spec), the bridge as the real kernel, and the reverse rule as another such
# operator, registered as its autograd formula. Eager calls never take this path, nor import
# torch._dynamo.

#: Wrapped functions by id, so that the traced call takes only tensors and constants.
_WRAPPED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_OP_NUMBER = itertools.count()


def _call_by_key(key: int, args: tuple[Any, ...]) -> Any:
    """A wrapped call as AOTAutograd traces it (defined here, outside any compiled region, as
    `nonstrict_trace` requires; declared non-strict on first use, which Dynamo traces too)."""
    return _WRAPPED[key].call_with(args, _op_apply)


def _op_apply(bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
    return list(_op(bridge)(xs))


def _op(bridge: BridgedFunction) -> Any:
    """The bridge as a torch custom operator (built once; its gradient operator when needed)."""
    op = bridge.state.get("torch_op")
    if op is not None:
        return op
    torch = framework("torch")
    base = re.sub(r"\W+", "_", bridge.label).strip("_")
    name = f"interop::{base[-80:].strip('_') or 'fn'}_{next(_OP_NUMBER)}"  # the tail names fn

    def kernel(xs: list[Any]) -> list[Any]:
        ys = bridge.run(_values(xs))
        # an operator's outputs may not share memory with its inputs (zero-copy identity)
        held = {x.untyped_storage().data_ptr() for x in xs}
        return [y.clone() if y.untyped_storage().data_ptr() in held else y for y in ys]

    op = torch.library.custom_op(name, kernel, mutates_args=(), schema="(Tensor[] xs) -> Tensor[]")

    @op.register_fake
    def fake(xs: list[Any]) -> list[Any]:
        # the source finds shapes from concrete sizes: symbolic ones are specialised (guarded)
        specs = bridge.out_specs(
            tuple(TensorSpec(tuple(int(d) for d in x.shape), dtype_name(x.dtype)) for x in xs)
        )
        device = xs[0].device if xs else "cpu"
        return [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=device) for s in specs]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[0], *output)
        ctx.count = len(inputs[0])

    def backward(ctx: Any, cts: list[Any]) -> tuple[list[Any]]:
        saved = ctx.saved_tensors
        xs, ys = list(saved[: ctx.count]), saved[ctx.count :]
        cts_d = [
            torch.zeros_like(y) if c is None else c
            for y, c, d in zip(ys, cts, bridge.out_diff, strict=True)
            if d
        ]
        found = iter(_op(bridge.backward())([*xs, *cts_d]))
        return ([next(found) if d else None for d in bridge.diff],)

    op.register_autograd(backward, setup_context=setup_context)
    bridge.state["torch_op"] = op
    return op


class TorchTarget(Target):
    name = "torch"

    def adopt(self, wrapped: Any) -> None:
        _WRAPPED[id(wrapped)] = wrapped  # here: Dynamo cannot trace weak references

    def compiling(self) -> bool:
        return bool(framework("torch").compiler.is_compiling())

    def compiled(self, wrapped: Any, args: tuple[Any, ...]) -> Any:
        torch = framework("torch")
        return torch._dynamo.nonstrict_trace(_call_by_key)(id(wrapped), args)

    def tensor_types(self) -> tuple[type, ...]:
        return (framework("torch").Tensor,)

    def value_and_grad(self, fn: Any, x: Any) -> tuple[Any, Any]:
        torch = framework("torch")
        x = x.detach().requires_grad_(True)
        y = fn(x)
        (grad,) = torch.autograd.grad(y, x)
        return y.detach(), grad

    def apply(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
        torch = framework("torch")
        plain, for_transforms = _torch_functions()
        transforms = torch._C._are_functorch_transforms_active()
        record = torch.is_grad_enabled() and any(x.requires_grad for x in xs)
        forward_ad = getattr(torch.autograd.forward_ad, "_current_level", 0) >= 0
        if not (record or transforms or forward_ad):
            return bridge.run(_values(xs))  # nothing to differentiate: no Function to build
        function = for_transforms if transforms else plain
        return list(function.apply(bridge, record, *xs)[:-1])


#: what `TorchAdapter.grad_source()` and `grad_target()` return
SOURCE = TorchSource()
TARGET = TorchTarget()
