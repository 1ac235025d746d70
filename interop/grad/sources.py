"""The framework a wrapped function is written in: how to run it, and its reverse-mode rule.

Every method works on flat lists of the source's tensors. A flat function `fn(xs) -> ys` is the
user's function with its structure and non-tensor arguments closed in (see `bridge.FlatFn`).
`vjp_fn` returns another flat function, written with the source's own API, so that the rule
can be bridged again: that is how second and higher orders reach the target's autodiff.

Conventions for complex numbers differ: JAX's VJP is `c·J`, torch's and TensorFlow's
`c·conj(J)`. With `conj=True` cotangents are conjugated on the way in and gradients on the
way out, so the result is in the target's convention.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .. import api
from ..errors import InteropError
from .errors import OutSpecError
from .tree import Spec, dtype_name

Flat = Callable[[list[Any]], list[Any]]
Pullback = Callable[[list[Any]], list[Any]]


def framework(name: str) -> Any:
    """A framework module, imported lazily (untyped here: the core type-checks without them)."""
    return sys.modules.get(name) or importlib.import_module(name)


#: dtypes JAX narrows to 32 bits when jax_enable_x64 is off
WIDE = frozenset({"float64", "complex128", "int64", "uint64"})


def convert(x: Any, to: str) -> Any:
    """`interop.convert` (the core copies unaligned buffers before TensorFlow sees them)."""
    return api.convert(x, to)


class Source:
    """What the bridge needs from the framework `fn` is written in."""

    name = ""
    #: True when the framework's VJP is `c·conj(J)` (torch, TensorFlow), False for JAX's `c·J`.
    conj_vjp = True

    def tensor_types(self) -> tuple[type, ...]:
        raise NotImplementedError

    def dtype(self, x: Any) -> str:
        return dtype_name(x.dtype)

    def take(self, x: Any) -> Any:
        """A tensor of this framework holding `x` (shared where memory can be shared)."""
        return convert(x, self.name)

    def give(self, y: Any, to: str) -> Any:
        """An output of `fn` as framework `to`'s tensor."""
        return convert(y, to)

    def call(self, fn: Flat, xs: list[Any]) -> list[Any]:
        """`fn(xs)` with no gradient recorded."""
        return fn(xs)

    @contextlib.contextmanager
    def threads(self, count: int) -> Iterator[None]:
        """This framework's intra-op threads set to `count` (0: as they are) meanwhile. JAX and
        TensorFlow fix theirs when their runtime starts: they are left as they are."""
        yield

    def forward(
        self, fn: Flat, xs: list[Any], diff: list[bool], out_diff: list[bool] | None, conj: bool
    ) -> tuple[list[Any], Pullback]:
        """`fn(xs)` and a pullback from cotangents of the differentiable outputs to gradients
        of the differentiable inputs. Here the pullback is `vjp_fn` (built once per flat
        function), which recomputes the forward: no state is kept between the two."""
        ys = self.call(fn, xs)
        known = out_diff if out_diff is not None else [self._diff(y) for y in ys]
        back = self.cached_vjp(fn, diff, known, conj)
        return ys, lambda cts: self.call(back, [*xs, *cts])

    def cached_vjp(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        """`vjp_fn`, built once per flat function and mask."""
        cache = _cache(fn)
        key = ("vjp", tuple(diff), tuple(out_diff), conj)
        back: Flat | None = cache.get(key)
        if back is None:
            back = cache[key] = self.vjp_fn(fn, diff, out_diff, conj)
        return back

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        """A flat function `(xs + cotangents) -> gradients of the differentiable inputs`."""
        raise NotImplementedError

    def out_specs(self, fn: Flat, specs: list[Spec]) -> list[Spec]:
        """The outputs' specs for inputs of these specs, found without running on data."""
        raise NotImplementedError

    def _diff(self, y: Any) -> bool:
        return Spec((), self.dtype(y)).differentiable


class JaxSource(Source):
    name = "jax"
    conj_vjp = False

    def tensor_types(self) -> tuple[type, ...]:
        jax = framework("jax")

        return (jax.Array,)

    def take(self, x: Any) -> Any:
        """Host tensors cross as NumPy views: `jax.jit` takes those zero-copy when aligned, for
        a fraction of what JAX's DLPack importer costs (measured 16 µs against 98 µs with the
        call). Dtypes JAX would narrow (x64 off) or NumPy cannot hold go through JAX's import,
        which refuses or imports them."""
        jax = framework("jax")
        if isinstance(x, jax.Array) or not _on_host(x):
            return convert(x, "jax")
        if dtype_name(x.dtype) in WIDE and not jax.config.read("jax_enable_x64"):
            return convert(x, "jax")  # refused, with the switch named
        try:
            return api.convert(x, "numpy")
        except InteropError:
            return convert(x, "jax")

    def call(self, fn: Flat, xs: list[Any]) -> list[Any]:
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

    def out_specs(self, fn: Flat, specs: list[Spec]) -> list[Spec]:
        jax = framework("jax")

        shapes = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs]
        out = jax.eval_shape(fn, shapes)
        return [Spec(tuple(o.shape), dtype_name(o.dtype)) for o in out]


def _cache(fn: Any) -> dict[Any, Any]:
    """A flat function's own cache (its jitted forms and VJP live as long as it does)."""
    found: dict[Any, Any] | None = getattr(fn, "cache", None)
    if found is None:
        found = fn.cache = {}
    return found


def _jitted(fn: Flat) -> Flat:
    """`jax.jit(fn)`, built once per flat function; `fn` itself from the first time JAX cannot
    trace it (Python control flow on values), so such functions still run, eagerly."""
    cache = _cache(fn)
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
    device = getattr(x, "device", None)
    if hasattr(x, "is_cpu"):  # torch
        return bool(x.is_cpu)
    return isinstance(device, str) and "CPU:" in device  # TensorFlow


class TorchSource(Source):
    """torch tensors are writable: `fn` always gets its own copies (`clone`), so a function
    that writes into its inputs never reaches the caller's memory (a TF constant or JAX buffer
    shared zero-copy), and it may write into them even while gradients are recorded."""

    name = "torch"

    def tensor_types(self) -> tuple[type, ...]:
        torch = framework("torch")

        return (torch.Tensor,)

    @contextlib.contextmanager
    def threads(self, count: int) -> Iterator[None]:
        torch = framework("torch")

        before = torch.get_num_threads()
        if count <= 0 or count == before:
            yield
            return
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def give(self, y: Any, to: str) -> Any:
        y = y.detach()
        if y.is_conj():  # torch's exports drop the lazy conj and neg bits: resolve them
            y = y.resolve_conj()
        if y.is_neg():
            y = y.resolve_neg()
        return convert(y, to)

    def call(self, fn: Flat, xs: list[Any]) -> list[Any]:
        torch = framework("torch")

        with torch.no_grad():
            return fn([x.clone() for x in xs])

    def forward(
        self, fn: Flat, xs: list[Any], diff: list[bool], out_diff: list[bool] | None, conj: bool
    ) -> tuple[list[Any], Pullback]:
        torch = framework("torch")

        leaves = [x.detach().requires_grad_(d) for x, d in zip(xs, diff, strict=True)]
        with torch.enable_grad():
            ys = fn([x.clone() for x in leaves])
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

    def out_specs(self, fn: Flat, specs: list[Spec]) -> list[Spec]:
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
            return [Spec(tuple(y.shape), self.dtype(y)) for y in ys]

    def _meta_specs(self, fn: Flat, specs: list[Spec]) -> list[Spec]:
        torch = framework("torch")

        with torch.no_grad():
            xs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta") for s in specs]
            return [Spec(tuple(y.shape), self.dtype(y)) for y in fn(xs)]


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


class TensorflowSource(Source):
    name = "tensorflow"

    def tensor_types(self) -> tuple[type, ...]:
        tf = framework("tensorflow")

        return (tf.Tensor, tf.Variable, tf.IndexedSlices)

    def give(self, y: Any, to: str) -> Any:
        return convert(_dense(y), to)

    def call(self, fn: Flat, xs: list[Any]) -> list[Any]:
        return [_dense(y) for y in fn(xs)]

    def forward(
        self, fn: Flat, xs: list[Any], diff: list[bool], out_diff: list[bool] | None, conj: bool
    ) -> tuple[list[Any], Pullback]:
        tf = framework("tensorflow")

        inputs = [x for x, d in zip(xs, diff, strict=True) if d]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(inputs)
            ys = [_dense(y) for y in fn(xs)]
        known = out_diff if out_diff is not None else [self._diff(y) for y in ys]
        asked: list[bool] = []

        def pullback(cts: list[Any]) -> list[Any]:
            if asked:  # a tape answers once (persistent ones cost more): recompute after that
                return self.call(self.cached_vjp(fn, diff, known, conj), [*xs, *cts])
            asked.append(True)
            return _tf_grads(tape, ys, inputs, cts, conj)

        return ys, pullback

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        tf = framework("tensorflow")

        n = len(diff)

        def vjp(args: list[Any]) -> list[Any]:
            xs, cts = args[:n], list(args[n:])
            inputs = [x for x, d in zip(xs, diff, strict=True) if d]
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(inputs)
                ys = [_dense(y) for y in fn(list(xs))]
            return _tf_grads(tape, ys, inputs, cts, conj)

        return vjp

    def out_specs(self, fn: Flat, specs: list[Spec]) -> list[Spec]:
        tf = framework("tensorflow")

        traced = tf.function(lambda *xs: fn(list(xs)), autograph=False)
        concrete = traced.get_concrete_function(*[tf.TensorSpec(s.shape, s.dtype) for s in specs])
        out = []
        for y in tf.nest.flatten(concrete.structured_outputs):
            if y.shape.rank is None or None in y.shape.as_list():
                raise OutSpecError(
                    f"TensorFlow cannot tell an output's shape ahead ({y.shape}); pass out_spec"
                )
            out.append(Spec(tuple(y.shape.as_list()), dtype_name(y.dtype)))
        return out


def _dense(y: Any) -> Any:
    """TF gradients of gathers are `IndexedSlices`: a dense tensor is what crosses over."""
    tf = framework("tensorflow")

    return tf.convert_to_tensor(y) if isinstance(y, tf.IndexedSlices) else y


def _tf_grads(tape: Any, ys: list[Any], inputs: list[Any], cts: list[Any], conj: bool) -> list[Any]:
    tf = framework("tensorflow")

    if conj:
        cts = [tf.math.conj(c) if c.dtype.is_complex else c for c in cts]
    outs = [y for y in ys if y.dtype.is_floating or y.dtype.is_complex]
    if not inputs:
        return []
    grads = tape.gradient(
        outs, inputs, output_gradients=cts, unconnected_gradients=tf.UnconnectedGradients.ZERO
    )
    grads = [_dense(g) for g in grads]
    return [tf.math.conj(g) if conj and g.dtype.is_complex else g for g in grads]


SOURCES: dict[str, type[Source]] = {
    "jax": JaxSource,
    "torch": TorchSource,
    "tensorflow": TensorflowSource,
}
