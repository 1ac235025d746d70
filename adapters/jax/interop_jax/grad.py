"""JAX for `interop.wrap` (`JaxAdapter.grad_source()` / `grad_target()`).

- As a source: the function runs under `jax.jit` (eagerly once JAX cannot trace it), its
  reverse rule is `jax.vjp`, and shapes are found ahead by `jax.eval_shape`.
- As a target: a `jax.custom_vjp` built once per bridge; concrete arrays run the function
  directly, traced ones (`jit`, `vmap`, `scan`) through an XLA FFI custom call
  (`interop_jax.xla_ffi`) or, without the compiled accelerator, `jax.pure_callback`, with the
  outputs' specs.

Imported only when `interop.wrap` names JAX; JAX itself only once a wrapped function runs.
"""

from __future__ import annotations

import inspect
from typing import Any

from interop.errors import InteropError, UnsupportedDTypeError
from interop.grad import (
    WIDE,
    BridgedFunction,
    Flat,
    Source,
    Target,
    TensorSpec,
    UnsupportedTransformError,
    dtype_name,
    flat_cache,
    framework,
)


class JaxSource(Source):
    name = "jax"
    conj_vjp = False

    def tensor_types(self) -> tuple[type, ...]:
        jax = framework("jax")

        return (jax.Array,)

    #: (tensor type, dtype) pairs whose host tensors were taken as NumPy views: decided once
    _through_numpy: set[tuple[type, Any]] = set()

    def take(self, x: Any) -> Any:
        """Host tensors cross as NumPy views: `jax.jit` takes those zero-copy when aligned, for
        a fraction of what JAX's DLPack importer costs (measured 16 µs against 98 µs with the
        call). Dtypes JAX would narrow (x64 off) or NumPy cannot hold go through JAX's import,
        which refuses or imports them. Once a type and dtype crossed as a view, their host
        tensors skip the decision (it is every step's, in a training loop)."""
        if (type(x), x.dtype) in self._through_numpy and _on_host(x):
            try:
                return self.convert(x, "numpy")
            except InteropError:  # another hub, whose NumPy refuses it: decided in full
                pass
        return self._take(x)

    def _take(self, x: Any) -> Any:
        jax = framework("jax")
        if isinstance(x, jax.Array) or not _on_host(x):
            return self.convert(x, "jax")
        wide = dtype_name(x.dtype) in WIDE
        if wide and not jax.config.read("jax_enable_x64"):
            return self.convert(x, "jax")  # refused, with the switch named
        try:
            taken = self.convert(x, "numpy")
        except InteropError:
            return self.convert(x, "jax")
        if not wide:  # (wide ones depend on jax_enable_x64, read anew)
            self._through_numpy.add((type(x), x.dtype))
        return taken

    def call(self, fn: Flat, xs: list[Any], owned: bool = False) -> list[Any]:
        return _jitted(fn)(xs)

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        jax = framework("jax")
        jnp = framework("jax.numpy")

        n = len(diff)
        where = [i for i, d in enumerate(diff) if d]

        def vjp(args: list[Any]) -> list[Any]:
            xs, cts = list(args[:n]), list(args[n:])

            def of_diff(*chosen: Any) -> list[Any]:
                full = list(xs)
                for i, value in zip(where, chosen, strict=True):
                    full[i] = value
                ys = fn(full)
                return [y for y, d in zip(ys, out_diff, strict=True) if d]

            if conj:
                cts = [jnp.conj(c) if jnp.iscomplexobj(c) else c for c in cts]
            _, pull = jax.vjp(of_diff, *[xs[i] for i in where])
            grads = list(pull(cts))
            return [jnp.conj(g) if conj and jnp.iscomplexobj(g) else g for g in grads]

        return vjp

    def out_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        jax = framework("jax")

        shapes = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs]
        out = jax.eval_shape(fn, shapes)
        return [TensorSpec(tuple(o.shape), dtype_name(o.dtype)) for o in out]


def _jitted(fn: Flat) -> Flat:
    """`jax.jit(fn)`, built once per flat function; `fn` itself from the first time JAX cannot
    trace it (Python control flow on values), so such functions still run, eagerly."""
    cache = flat_cache(fn)
    found: Flat | None = cache.get("jit")
    if found is not None:
        return found
    jax = framework("jax")
    jitted = jax.jit(fn)

    def eager(xs: list[Any]) -> list[Any]:
        return fn([jax.numpy.asarray(x) for x in xs])  # JAX arrays, not the NumPy views

    def run(xs: list[Any]) -> list[Any]:
        try:
            return list(jitted(xs))
        except Exception as exc:
            if not isinstance(exc.__cause__ or exc, jax.errors.JAXTypeError):
                raise
            cache["jit"] = eager  # a tracing failure: eager from now on
            return eager(xs)

    cache["jit"] = run
    return run


def _on_host(x: Any) -> bool:
    is_cpu = getattr(x, "is_cpu", None)  # torch
    if is_cpu is not None:
        return bool(is_cpu)
    device = getattr(x, "device", None)
    return isinstance(device, str) and "CPU:" in device  # TensorFlow


class JaxTarget(Target):
    name = "jax"
    conj_vjp = False

    def tensor_types(self) -> tuple[type, ...]:
        jax = framework("jax")

        return (jax.Array,)

    def value_and_grad(self, fn: Any, x: Any) -> tuple[Any, Any]:
        jax = framework("jax")
        value, grad = jax.value_and_grad(fn)(x)
        return value, grad

    def apply(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
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
                f"{bridge.label}: forward-mode autodiff (jax.jvp, jax.jacfwd, jax.hessian) "
                f"cannot go through a function bridged from {bridge.source.name}: "
                "only reverse mode is carried (use jax.grad, jax.vjp, jax.jacrev)"
            ) from exc

    def _rule(self, bridge: BridgedFunction) -> Any:
        jax = framework("jax")

        @jax.custom_vjp
        def bridged(*xs: Any) -> tuple[Any, ...]:
            return self._run(bridge, xs)

        def forward(*primals: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            xs = tuple(p.value for p in primals)
            # gradients only of the inputs the caller differentiates (`jax.grad`'s argnums)
            needed = [p.perturbed for p in primals]
            narrow = bridge.narrowed(needed)
            mask = _mask(narrow.diff)
            if _under_jit_only(xs) and any(narrow.diff) and _ffi_active():
                # Only `jit` is watching: one FFI call runs the source's forward and keeps its
                # autograd state under a token, which the backward's call consumes.
                *ys, token = self._outer_safe(narrow, "forward")(*xs)
                return tuple(ys), (xs, token, mask)
            # Traced values may belong to an outer derivative: go through the rule itself, so
            # that it sees a differentiable output. The backward recomputes from the inputs.
            traced = any(isinstance(x, jax.core.Tracer) for x in xs)
            return (bridged(*xs) if traced else self._run(bridge, xs)), (xs, None, mask)

        def backward(res: tuple[Any, Any, Any], cts: tuple[Any, ...]) -> tuple[Any, ...]:
            xs, token, mask = res
            narrow = bridge.narrowed(_needed(mask))
            cts_d = [_dense(c) for c, d in zip(cts, narrow.out_diff, strict=True) if d]
            args = [*xs, *cts_d]
            if token is not None and _under_jit_only([*args, token]) and _ffi_active():
                grads = iter(self._outer_safe(narrow, "pull")(*args, token))
            else:
                grads = iter(self.apply(narrow.backward(), args))
            return tuple(next(grads) if d else None for d in narrow.diff)

        bridged.defvjp(forward, backward, symbolic_zeros=True)
        return bridged

    def _outer_safe(self, bridge: BridgedFunction, mode: str) -> Any:
        """The FFI call of `mode` ("forward": outputs and a token; "pull": gradients from the
        inputs, cotangents and token) as a function that a transformation applied outside the
        jit (`grad(jit(grad(f)))`, `vmap`, `remat`) can still differentiate, as the rule
        itself: the values of `like`, which recomputes instead of keeping the forward's state
        (token 0). Built once per bridge and mode."""
        found = bridge.state.get("jax " + mode)
        if found is not None:
            return found
        jax = framework("jax")
        from . import xla_ffi

        def call(*xs: Any) -> Any:
            if mode == "forward":
                return self._run(bridge, xs, "forward")
            args, token = list(xs[:-1]), xs[-1]
            specs = bridge.backward().out_specs(tuple(_spec(a) for a in args))
            shapes = tuple(jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs)
            return tuple(xla_ffi.call(bridge, specs, shapes, (*args, token), "pull"))

        def like(*xs: Any) -> tuple[Any, ...]:
            if mode == "forward":
                return (*self.apply(bridge, list(xs)), jax.numpy.zeros((), "int32"))
            return tuple(self.apply(bridge.backward(), list(xs[:-1])))

        found = bridge.state["jax " + mode] = jax.custom_vjp(call)
        found.defvjp(lambda *xs: jax.vjp(like, *xs), lambda pull, cts: pull(cts))
        return found

    def _run(
        self, bridge: BridgedFunction, xs: tuple[Any, ...], mode: str = "run"
    ) -> tuple[Any, ...]:
        jax = framework("jax")

        if not any(isinstance(x, jax.core.Tracer) for x in xs):
            return tuple(bridge.run(_arrays(xs)))
        _refuse_inputs(bridge, xs)
        specs = bridge.out_specs(tuple(_spec(x) for x in xs))
        shapes = _shapes(bridge, specs)
        from . import xla_ffi  # an XLA custom call where built and on

        if xla_ffi.active():
            return tuple(xla_ffi.call(bridge, specs, shapes, xs, mode))

        def callback(*arrays: Any) -> tuple[Any, ...]:
            ys = bridge.run_inside(list(arrays), "numpy")
            got = [TensorSpec(tuple(y.shape), dtype_name(y.dtype)) for y in ys]
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


def _under_jit_only(xs: Any) -> bool:
    """Whether `jax.jit` (a jaxpr trace) is the only transformation watching `xs`: no outer
    derivative, no `vmap`; then a forward's kept state is safe to pair with its backward."""
    jax = framework("jax")
    jaxpr_tracer = framework("jax.interpreters.partial_eval").DynamicJaxprTracer
    tracers = [x for x in xs if isinstance(x, jax.core.Tracer)]
    return bool(tracers) and all(type(x) is jaxpr_tracer for x in tracers)


def _refuse_inputs(bridge: BridgedFunction, xs: tuple[Any, ...]) -> None:
    """Traced inputs the source cannot take, refused as on concrete ones (the same typed
    error, naming the leaf), not as a failure to infer the outputs: checked on one 0-d
    array of each dtype, once per bridge (its input dtypes are fixed)."""
    if "jax inputs taken" in bridge.state:
        return
    jax = framework("jax")
    with jax.ensure_compile_time_eval():
        bridge.take([jax.numpy.zeros((), x.dtype) for x in xs])
    bridge.state["jax inputs taken"] = True


def _shapes(bridge: BridgedFunction, specs: list[TensorSpec]) -> tuple[Any, ...]:
    """The outputs' `ShapeDtypeStruct`s; a dtype JAX does not hold (or would narrow) refused
    as on concrete outputs: an UnsupportedDTypeError naming the leaf."""
    jax = framework("jax")
    from . import NARROW

    for i, spec in enumerate(specs):
        if spec.dtype in WIDE and not jax.config.read("jax_enable_x64"):
            raise UnsupportedDTypeError(
                f"{bridge.label}: output leaf {i} is {spec.dtype} and jax_enable_x64 is "
                "off, so JAX would narrow it to 32 bits; enable it with "
                "jax.config.update('jax_enable_x64', True) or cast inside the function"
            )
        if spec.dtype not in NARROW | WIDE:
            raise UnsupportedDTypeError(
                f"{bridge.label}: output leaf {i}: jax cannot import a {spec.dtype} tensor from "
                f"{bridge.source.name}: jax holds no {spec.dtype} (it imports "
                f"{', '.join(sorted(NARROW | WIDE))})"
            )
    return tuple(jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs)


def _spec(x: Any) -> TensorSpec:
    return TensorSpec(tuple(x.shape), dtype_name(x.dtype))


def _mask(needed: list[bool]) -> tuple[Any, ...]:
    """Which inputs are differentiated, as a residual JAX carries as structure, not data
    (`None` where needed, `()` where not: both pytrees without leaves)."""
    return tuple(None if n else () for n in needed)


def _needed(mask: tuple[Any, ...]) -> list[bool]:
    return [m is None for m in mask]


def _dense(ct: Any) -> Any:
    """A cotangent as an array: JAX passes a symbolic zero for an output nobody reads."""
    jax = framework("jax")
    if isinstance(ct, jax.custom_derivatives.SymbolicZero):
        return jax.numpy.zeros(ct.shape, ct.dtype)
    return ct


def _ffi_active() -> bool:
    from . import xla_ffi

    return xla_ffi.active()


def _arrays(xs: Any) -> list[Any]:
    """Concrete JAX values as arrays (inside rules they may be JAX's typed Python scalars)."""
    jax = framework("jax")
    return [x if isinstance(x, jax.Array) else jax.numpy.asarray(x) for x in xs]


#: what `JaxAdapter.grad_source()` and `grad_target()` return
SOURCE = JaxSource()
TARGET = JaxTarget()
