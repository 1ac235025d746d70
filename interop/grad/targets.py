"""The framework a wrapped function is called from, and whose autodiff differentiates it.

- torch: a `torch.autograd.Function`; its backward is the bridged reverse rule, recorded by
  torch when `create_graph=True` (higher orders), the saved pullback otherwise. Under
  `torch.compile` (fullgraph too) each bridge is a torch custom operator instead (see below).
- JAX: a `jax.custom_vjp` built once per bridge; concrete arrays run the function directly,
  traced ones (`jit`, `vmap`, `scan`) through an XLA FFI custom call (interop_jax.xla_ffi) or,
  without the compiled accelerator, `jax.pure_callback`, with the outputs' specs.
- TensorFlow: a `tf.custom_gradient` built once per bridge; eager tensors run directly, graph
  tensors (`tf.function`) through `tf.py_function`.
"""

from __future__ import annotations

import inspect
import itertools
import re
import weakref
from typing import Any

from ..errors import UnsupportedDTypeError
from .bridge import Bridge
from .errors import UnsupportedTransformError
from .sources import WIDE, framework
from .tree import Spec, dtype_name


class Target:
    name = ""
    conj_vjp = True

    def tensor_types(self) -> tuple[type, ...]:
        raise NotImplementedError

    def prepare(self, x: Any) -> Any:
        return x

    def dtype(self, x: Any) -> str:
        return dtype_name(x.dtype)

    def apply(self, bridge: Bridge, xs: list[Any]) -> list[Any]:
        """The bridged function of `xs`, recorded by this framework's autodiff."""
        raise NotImplementedError

    def adopt(self, wrapped: Any) -> None:
        """Called once for each function wrapped with this target."""

    def compiling(self) -> bool:
        """Whether this framework's compiler is tracing the caller (torch.compile)."""
        return False

    def compiled(self, wrapped: Any, args: tuple[Any, ...]) -> Any:
        """`wrapped(*args)` as the compiler traces it (only called where `compiling()`)."""
        raise NotImplementedError


def _held(value: Any) -> Any:
    """A non-tensor output of a torch Function: carries the pullback to the context."""
    return (value,)


def _torch_forward(bridge: Bridge, record: bool, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    if record:
        ys, pull = bridge.forward(list(xs))
    else:
        ys, pull = bridge.run(list(xs)), None
    return (*ys, _held(pull))


def _torch_save(ctx: Any, bridge: Bridge, xs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
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
        grads = bridge.backward().run([*xs, *cts_d])
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
        def forward(ctx: Any, bridge: Bridge, record: bool, *xs: Any) -> Any:
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
        def forward(bridge: Bridge, record: bool, *xs: Any) -> Any:
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


def _op_apply(bridge: Bridge, xs: list[Any]) -> list[Any]:
    return list(_op(bridge)(xs))


def _op(bridge: Bridge) -> Any:
    """The bridge as a torch custom operator (built once; its gradient operator when needed)."""
    op = bridge.state.get("torch_op")
    if op is not None:
        return op
    torch = framework("torch")
    base = re.sub(r"\W+", "_", bridge.label).strip("_")
    name = f"interop::{base[-80:].strip('_') or 'fn'}_{next(_OP_NUMBER)}"  # the tail names fn

    def kernel(xs: list[Any]) -> list[Any]:
        ys = bridge.run(list(xs))
        # an operator's outputs may not share memory with its inputs (zero-copy identity)
        held = {x.untyped_storage().data_ptr() for x in xs}
        return [y.clone() if y.untyped_storage().data_ptr() in held else y for y in ys]

    op = torch.library.custom_op(name, kernel, mutates_args=(), schema="(Tensor[] xs) -> Tensor[]")

    @op.register_fake
    def fake(xs: list[Any]) -> list[Any]:
        # the source finds shapes from concrete sizes: symbolic ones are specialised (guarded)
        specs = bridge.out_specs(
            tuple(Spec(tuple(int(d) for d in x.shape), dtype_name(x.dtype)) for x in xs)
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

    def apply(self, bridge: Bridge, xs: list[Any]) -> list[Any]:
        torch = framework("torch")
        plain, for_transforms = _torch_functions()
        transforms = torch._C._are_functorch_transforms_active()
        record = torch.is_grad_enabled() and any(x.requires_grad for x in xs)
        forward_ad = getattr(torch.autograd.forward_ad, "_current_level", 0) >= 0
        if not (record or transforms or forward_ad):
            return bridge.run(xs)  # nothing to differentiate: no Function to build
        function = for_transforms if transforms else plain
        return list(function.apply(bridge, record, *xs)[:-1])


class JaxTarget(Target):
    name = "jax"
    conj_vjp = False

    def tensor_types(self) -> tuple[type, ...]:
        jax = framework("jax")

        return (jax.Array,)

    def apply(self, bridge: Bridge, xs: list[Any]) -> list[Any]:
        jax = framework("jax")
        if not any(isinstance(x, jax.core.Tracer) for x in xs):
            return bridge.run(_arrays(xs))  # concrete values: no transformation is watching
        rule = bridge.state.get("jax")
        if rule is None:
            rule = bridge.state["jax"] = self._rule(bridge)
        try:
            return list(rule(*xs))
        except TypeError as exc:
            if "forward-mode" not in str(exc):
                raise
            raise UnsupportedTransformError(
                f"{bridge.label}: forward-mode autodiff (jax.jvp, jax.jacfwd, jax.hessian, "
                f"jax.linearize) cannot go through a function bridged from {bridge.source.name}: "
                "only reverse mode is carried (use jax.grad, jax.vjp, jax.jacrev)"
            ) from exc

    def _rule(self, bridge: Bridge) -> Any:
        jax = framework("jax")

        @jax.custom_vjp
        def bridged(*xs: Any) -> tuple[Any, ...]:
            return self._run(bridge, xs)

        def forward(*xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            # Traced values may belong to an outer derivative: go through the rule itself, so
            # that it sees a differentiable output. The backward recomputes from the inputs.
            traced = any(isinstance(x, jax.core.Tracer) for x in xs)
            return (bridged(*xs) if traced else self._run(bridge, xs)), xs

        def backward(xs: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
            cts_d = [c for c, d in zip(cts, bridge.out_diff, strict=True) if d]
            grads = iter(self.apply(bridge.backward(), [*xs, *cts_d]))
            return tuple(next(grads) if d else None for d in bridge.diff)

        bridged.defvjp(forward, backward)
        return bridged

    def _run(self, bridge: Bridge, xs: tuple[Any, ...]) -> tuple[Any, ...]:
        jax = framework("jax")

        if not any(isinstance(x, jax.core.Tracer) for x in xs):
            return tuple(bridge.run(_arrays(xs)))
        specs = bridge.out_specs(tuple(Spec(tuple(x.shape), dtype_name(x.dtype)) for x in xs))
        if not jax.config.read("jax_enable_x64"):
            for i, spec in enumerate(specs):
                if spec.dtype in WIDE:
                    raise UnsupportedDTypeError(
                        f"{bridge.label}: output leaf {i} is {spec.dtype} and jax_enable_x64 is "
                        "off, so JAX would narrow it to 32 bits; enable it with "
                        "jax.config.update('jax_enable_x64', True) or cast inside the function"
                    )
        shapes = tuple(jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs)
        ffi = framework("interop_jax.xla_ffi")  # an XLA custom call where built and on
        if ffi.active():
            return tuple(ffi.call(bridge, specs, shapes, xs))

        def callback(*arrays: Any) -> tuple[Any, ...]:
            ys = bridge.run_inside(list(arrays), "numpy")
            got = [Spec(tuple(y.shape), dtype_name(y.dtype)) for y in ys]
            bridge.check_specs(got, specs)
            return tuple(ys)

        # Under vmap, one call per batch element (`fn` may not batch); JAX before 0.4.34
        # says so with `vectorized=False`.
        batching: dict[str, Any]
        if "vmap_method" in inspect.signature(jax.pure_callback).parameters:
            batching = {"vmap_method": "sequential"}
        else:  # pragma: no cover - old JAX
            batching = {"vectorized": False}
        return tuple(jax.pure_callback(callback, shapes, *xs, **batching))


def _arrays(xs: Any) -> list[Any]:
    """Concrete JAX values as arrays (inside rules they may be JAX's typed Python scalars)."""
    jax = framework("jax")
    return [x if isinstance(x, jax.Array) else jax.numpy.asarray(x) for x in xs]


def _recording() -> bool:
    """Whether a TF tape may record now (TF's private check; True when it is not there)."""
    try:
        could_record = framework("tensorflow.python.eager.record").could_possibly_record
    except (ImportError, AttributeError):  # pragma: no cover - assume it records
        return True
    return bool(could_record())


def _refuse_xla(bridge: Bridge) -> None:
    try:
        graph = framework("tensorflow.python.framework.ops").get_default_graph()
        in_xla = framework("tensorflow.python.ops.control_flow_util").GraphOrParentsInXlaContext
    except (ImportError, AttributeError):  # pragma: no cover - XLA reports EagerPyFunc itself
        return
    if in_xla(graph):
        raise UnsupportedTransformError(
            f"{bridge.label}: tf.function(jit_compile=True) cannot compile a function bridged "
            f"from {bridge.source.name}: XLA cannot call back into Python (it has no kernel for "
            "tf.py_function); drop jit_compile (plain tf.function runs it), or compile only "
            "the parts that do not call the wrapped function"
        )


class TensorflowTarget(Target):
    name = "tensorflow"

    def tensor_types(self) -> tuple[type, ...]:
        tf = framework("tensorflow")

        return (tf.Tensor, tf.Variable)

    def prepare(self, x: Any) -> Any:
        tf = framework("tensorflow")

        return tf.convert_to_tensor(x) if isinstance(x, tf.Variable) else x

    def apply(self, bridge: Bridge, xs: list[Any]) -> list[Any]:
        rule = bridge.state.get("tf")
        if rule is None:
            rule = bridge.state["tf"] = self._rule(bridge)
        return list(rule(*xs))

    def _rule(self, bridge: Bridge) -> Any:
        tf = framework("tensorflow")

        @tf.custom_gradient
        def bridged(*xs: Any) -> Any:
            pull = None
            if not tf.executing_eagerly():
                ys = self._graph_run(bridge, list(xs))
            elif _recording():
                ys, pull = bridge.forward(list(xs))
            else:
                ys = bridge.run(list(xs))

            def grad(*cts: Any) -> list[Any]:
                cts_d = [
                    tf.zeros_like(y) if c is None else c
                    for y, c, d in zip(ys, cts, bridge.out_diff, strict=True)
                    if d
                ]
                if pull is not None and not _recording():
                    grads = pull(cts_d)
                else:  # under a tape or in a graph: the rule itself is recorded
                    grads = self.apply(bridge.backward(), [*xs, *cts_d])
                found = iter(grads)
                return [next(found) if d else None for d in bridge.diff]

            return list(ys), grad

        return bridged

    def _graph_run(self, bridge: Bridge, xs: list[Any]) -> list[Any]:
        tf = framework("tensorflow")

        _refuse_xla(bridge)
        known = all(x.shape.rank is not None and None not in x.shape.as_list() for x in xs)
        shapes = [
            tuple(d or 1 for d in x.shape.as_list()) if x.shape.rank is not None else () for x in xs
        ]
        specs = bridge.out_specs(
            tuple(Spec(s, dtype_name(x.dtype)) for s, x in zip(shapes, xs, strict=True))
        )

        def callback(*tensors: Any) -> list[Any]:
            ys = bridge.run_inside(list(tensors))
            if known:
                got = [Spec(tuple(y.shape.as_list()), dtype_name(y.dtype)) for y in ys]
                bridge.check_specs(got, specs)
            return ys

        ys = tf.py_function(callback, xs, Tout=[tf.as_dtype(s.dtype) for s in specs])
        for y, spec in zip(ys, specs, strict=True):
            y.set_shape(spec.shape if known else [None] * len(spec.shape))
        return list(ys)


TARGETS: dict[str, type[Target]] = {
    "torch": TorchTarget,
    "jax": JaxTarget,
    "tensorflow": TensorflowTarget,
}
