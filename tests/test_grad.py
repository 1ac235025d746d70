"""interop.wrap: a function written with one framework, called and differentiated from another.

Every direction among torch, JAX and TensorFlow. The oracle is the target framework's own
autodiff on the same math written natively in the target (and, in float64, central finite
differences of the bridged function itself). Results are used in the target framework (its
kernels) before they are compared. Cases that could abort a process run in a subprocess.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import interop
from interop.grad import BridgedFunctionError, OutSpecError, UnsupportedTransformError

np = pytest.importorskip("numpy")

FRAMEWORKS = ("torch", "jax", "tensorflow")
INSTALLED = {fw: importlib.util.find_spec(fw) is not None for fw in FRAMEWORKS}
TF_CPP = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def needs(*frameworks: str) -> pytest.MarkDecorator:
    missing = [fw for fw in frameworks if not INSTALLED[fw]]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


def direction(source: str, target: str) -> Any:
    return pytest.param(source, target, id=f"{source}-{target}", marks=needs(source, target))


DIRECTIONS = [direction(s, t) for s in FRAMEWORKS for t in FRAMEWORKS if s != t]
TO_JAX_OR_TF = [direction(s, t) for s in FRAMEWORKS for t in ("jax", "tensorflow") if s != t]
TO_TORCH = [direction(s, "torch") for s in ("jax", "tensorflow")]


def module(name: str) -> Any:
    return importlib.import_module(name)


# --- the same math, written natively in each framework -------------------------------------------
def model(fw: str) -> Callable[[Any, Any], Any]:
    """f(x, w) = 2 tanh(x @ w) + sum(sin(x), axis 1): a (n, k) output of two inputs."""
    if fw == "torch":
        torch = module("torch")
        return lambda x, w: 2 * torch.tanh(x @ w) + torch.sin(x).sum(1, keepdim=True)
    if fw == "jax":
        jnp = module("jax.numpy")
        return lambda x, w: 2 * jnp.tanh(x @ w) + jnp.sin(x).sum(1, keepdims=True)
    tf = module("tensorflow")
    return lambda x, w: 2 * tf.tanh(x @ w) + tf.reduce_sum(tf.sin(x), 1, keepdims=True)


def complex_model(fw: str) -> Callable[[Any], Any]:
    """g(z) = sin(z) * conj(z) + z²: not holomorphic, so the VJP conventions differ."""
    if fw == "torch":
        torch = module("torch")
        return lambda z: torch.sin(z) * torch.conj(z) + z * z
    if fw == "jax":
        jnp = module("jax.numpy")
        return lambda z: jnp.sin(z) * jnp.conj(z) + z * z
    tf = module("tensorflow")
    return lambda z: tf.sin(z) * tf.math.conj(z) + z * z


# --- tensors and autodiff, natively in the target ------------------------------------------------
def tensor(fw: str, a: Any) -> Any:
    if fw == "torch":
        return module("torch").tensor(a)
    if fw == "jax":
        return module("jax.numpy").asarray(a)
    return module("tensorflow").constant(a)


def used(fw: str, t: Any) -> Any:
    """`t` through one of its framework's kernels, read back as NumPy."""
    if fw == "torch":
        return (t.detach() * 1).numpy()
    if fw == "jax":
        return np.asarray(t * 1)
    return (t * 1).numpy()


def vjp(fw: str, f: Callable[..., Any], args: list[Any], ct: Any) -> tuple[Any, list[Any]]:
    """f(*args) and the gradient of sum(f * ct) for each argument, by `fw`'s autodiff."""
    if fw == "torch":
        torch = module("torch")
        leaves = [a.detach().clone().requires_grad_(True) for a in args]
        y = f(*leaves)
        grads = torch.autograd.grad(y, leaves, ct)
        return y, list(grads)
    if fw == "jax":
        jax = module("jax")
        y, pull = jax.vjp(f, *args)
        return y, list(pull(ct))
    tf = module("tensorflow")
    with tf.GradientTape() as tape:
        tape.watch(args)
        y = f(*args)
    return y, tape.gradient(y, args, output_gradients=ct)


def compiled_vjp(fw: str, f: Callable[..., Any], args: list[Any], ct: Any) -> tuple[Any, list[Any]]:
    """The same under `jax.jit` or `tf.function`."""
    if fw == "jax":
        jax = module("jax")
        return jax.jit(lambda a, c: vjp("jax", f, a, c))(args, ct)
    tf = module("tensorflow")
    return tf.function(lambda a, c: vjp("tensorflow", f, a, c))(args, ct)


def second(fw: str, f: Callable[..., Any], x: Any, w: Any, ct: Any, v: Any) -> Any:
    """d/dx <grad_x sum(f(x, w) * ct), v>: a Hessian-vector product by reverse over reverse."""
    if fw == "torch":
        torch = module("torch")
        x = x.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad((f(x, w) * ct).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad((g * v).sum(), x)
        return h
    if fw == "jax":
        jax, jnp = module("jax"), module("jax.numpy")
        inner = jax.grad(lambda x: (f(x, w) * ct).sum())
        return jax.grad(lambda x: jnp.vdot(inner(x), v))(x)
    tf = module("tensorflow")
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            loss = tf.reduce_sum(f(x, w) * ct)
        g = inner.gradient(loss, x)
        dot = tf.reduce_sum(g * v)
    return outer.gradient(dot, x)


def data(dtype: str, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 3)).astype(dtype)
    w = rng.standard_normal((3, 2)).astype(dtype)
    ct = rng.standard_normal((4, 2)).astype(dtype)
    v = rng.standard_normal((4, 3)).astype(dtype)
    return x, w, ct, v


def close(got: Any, want: Any, dtype: str) -> None:
    tol = 1e-5 if dtype in ("float32", "complex64") else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# --- every direction: values and gradients against the target's own autodiff ---------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_value_and_gradients_match_the_targets_own_autodiff(
    source: str, target: str, dtype: str
) -> None:
    x, w, ct, _ = data(dtype)
    args = [tensor(target, x), tensor(target, w)]
    bridged = interop.wrap(model(source), source, target)
    y, grads = vjp(target, bridged, args, tensor(target, ct))
    y0, grads0 = vjp(target, model(target), args, tensor(target, ct))
    assert type(y) is type(y0) and used(target, y).dtype == np.dtype(dtype)
    close(used(target, y), used(target, y0), dtype)
    for got, want in zip(grads, grads0, strict=True):
        assert used(target, got).dtype == np.dtype(dtype)
        close(used(target, got), used(target, want), dtype)


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_float64_gradients_match_central_finite_differences(source: str, target: str) -> None:
    x, w, ct, v = data("float64", seed=1)
    bridged = interop.wrap(model(source), source, target)
    args = [tensor(target, x), tensor(target, w)]
    _, (gx, _) = vjp(target, bridged, args, tensor(target, ct))

    def loss(xv: Any) -> float:
        return float((used(target, bridged(tensor(target, xv), args[1])) * ct).sum())

    h = 1e-6
    numeric = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    analytic = float((used(target, gx) * v).sum())
    assert numeric == pytest.approx(analytic, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("source,target", TO_JAX_OR_TF)
def test_under_jax_jit_and_tf_function(source: str, target: str) -> None:
    x, w, ct, _ = data("float32")
    args = [tensor(target, x), tensor(target, w)]
    bridged = interop.wrap(model(source), source, target)
    y, grads = compiled_vjp(target, bridged, args, tensor(target, ct))
    y0, grads0 = vjp(target, model(target), args, tensor(target, ct))
    close(used(target, y), used(target, y0), "float32")
    for got, want in zip(grads, grads0, strict=True):
        close(used(target, got), used(target, want), "float32")


def keywords(fw: str) -> Callable[..., Any]:
    """`model(fw)` called with its weight and a scale by keyword: f(x, *, w, scale)."""
    f = model(fw)
    return lambda x, *, w, scale=1.0: f(x, w) * scale


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_keyword_arguments_carry_values_and_gradients(source: str, target: str) -> None:
    x, w, ct, _ = data("float32", seed=3)
    args = [tensor(target, x), tensor(target, w)]
    bridged = interop.wrap(keywords(source), source, target)
    native = keywords(target)
    calls: list[Callable[..., Any]] = [lambda x, w: bridged(x, w=w, scale=3.0)]
    if target == "torch":  # a compiled graph takes the float as an argument of its own
        torch = module("torch")
        compiled = torch.compile(lambda x, w, s: bridged(x, w=w, scale=s), fullgraph=True)
        calls += [lambda x, w: compiled(x, w, 3.0)]
    for call in calls:
        y, grads = vjp(target, call, args, tensor(target, ct))
        y0, grads0 = vjp(target, lambda x, w: native(x, w=w, scale=3.0), args, tensor(target, ct))
        close(used(target, y), used(target, y0), "float32")
        for got, want in zip(grads, grads0, strict=True):
            close(used(target, got), used(target, want), "float32")
    if target != "torch":  # under jax.jit and tf.function
        y, grads = compiled_vjp(
            target, lambda x, w: bridged(x, w=w, scale=3.0), args, tensor(target, ct)
        )
        close(used(target, y), used(target, y0), "float32")
        for got, want in zip(grads, grads0, strict=True):
            close(used(target, got), used(target, want), "float32")
    # a positional call of the same function is another structure: its own bridge, same values
    y1, _ = vjp(target, lambda x, w: bridged(x, w=w), args, tensor(target, ct))
    y2, _ = vjp(target, lambda x, w: native(x, w=w), args, tensor(target, ct))
    close(used(target, y1), used(target, y2), "float32")


@needs("torch", "jax")
def test_a_callable_object_whose_attributes_share_the_wrappers_names() -> None:
    """The wrapper takes `fn`'s name and docstring, not its attributes: an object's own
    `fn`, `source` or `target` do not replace the wrapper's."""
    torch, jnp = module("torch"), module("jax.numpy")

    class Scaled:
        """Multiplies by its factor."""

        def __init__(self) -> None:
            self.fn, self.source, self.target, self.out_spec = "mine", "a", "b", "c"

        def __call__(self, x: Any) -> Any:
            return jnp.sin(x) * 2

    bridged = interop.wrap(Scaled(), "jax", "torch")
    assert bridged.__doc__ == "Multiplies by its factor."
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    bridged(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos([0.5, 1.0]), rtol=1e-6)


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_second_order_matches_the_targets_own(source: str, target: str) -> None:
    x, w, ct, v = data("float64", seed=2)
    x, w, ct, v = (tensor(target, a) for a in (x, w, ct, v))
    got = second(target, interop.wrap(model(source), source, target), x, w, ct, v)
    want = second(target, model(target), x, w, ct, v)
    close(used(target, got), used(target, want), "float64")


@pytest.mark.parametrize("source,target", [direction(s, "jax") for s in ("torch", "tensorflow")])
def test_second_order_under_jax_jit(source: str, target: str) -> None:
    jax = module("jax")
    x, w, ct, v = (tensor("jax", a) for a in data("float64", seed=3))
    bridged = interop.wrap(model(source), source, "jax")
    got = jax.jit(lambda *a: second("jax", bridged, *a))(x, w, ct, v)
    want = second("jax", model("jax"), x, w, ct, v)
    close(np.asarray(got), np.asarray(want), "float64")


@needs("torch", "tensorflow")
def test_second_order_inside_tf_function() -> None:
    tf = module("tensorflow")
    x, w, ct, v = (tensor("tensorflow", a) for a in data("float64", seed=4))
    bridged = interop.wrap(model("torch"), "torch", "tensorflow")
    got = tf.function(lambda *a: second("tensorflow", bridged, *a))(x, w, ct, v)
    want = second("tensorflow", model("tensorflow"), x, w, ct, v)
    close(got.numpy(), want.numpy(), "float64")


# --- structures, constants, integers, inputs without gradients -----------------------------------
def nested_fn(fw: str) -> Callable[..., Any]:
    """Dict and list inputs, a Python number and an integer index passed through, and a dict
    holding a tuple of outputs."""
    f = model(fw)
    if fw == "tensorflow":
        tf = module("tensorflow")
        gather, total = tf.gather, tf.reduce_sum
    else:
        gather, total = (lambda a, i: a[i]), (lambda a: a.sum())

    def fn(params: dict[str, Any], batch: list[Any], scale: float) -> dict[str, Any]:
        y = f(batch[0], params["w"]) * scale
        picked = gather(batch[0], batch[1]) * params["b"]
        return {"y": y, "parts": (picked, total(y))}

    return fn


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_nested_inputs_and_outputs(source: str, target: str) -> None:
    x, w, _, _ = data("float64", seed=5)
    b = np.linspace(0.5, 1.5, 3)
    index = tensor(target, np.array([2, 0, 2], dtype=np.int32))
    bridged = interop.wrap(nested_fn(source), source, target)
    out = bridged({"w": tensor(target, w), "b": tensor(target, b)}, [tensor(target, x), index], 3.0)
    assert isinstance(out, dict) and list(out) == ["y", "parts"]
    assert isinstance(out["parts"], tuple) and len(out["parts"]) == 2
    cts = [np.ones((4, 2)), np.full((3, 3), 0.5), np.float64(2.0)]

    def run(f: Callable[..., Any]) -> tuple[Any, list[Any]]:
        def flat(xx: Any, ww: Any, bb: Any) -> Any:
            out = f({"w": ww, "b": bb}, [xx, index], 3.0)
            return out["y"], out["parts"][0], out["parts"][1]

        args = [tensor(target, a) for a in (x, w, b)]
        return vjp(target, flat, args, tuple(tensor(target, c) for c in cts))

    (y, *_), grads = run(bridged)
    (y0, *_), grads0 = run(nested_fn(target))
    close(used(target, y), used(target, y0), "float64")
    for got, want in zip(grads, grads0, strict=True):
        close(used(target, got), used(target, want), "float64")


@needs("jax", "torch")
def test_namedtuples_cross_and_non_tensor_outputs_are_refused() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")
    bridged = interop.wrap(lambda p: Pair(p.b * 2, jnp.sin(p.a)), "jax", "torch")
    a = torch.tensor([0.5, 1.0], requires_grad=True)
    out = bridged(Pair(a, torch.tensor(3.0)))
    assert type(out) is Pair and float(out.a.detach()) == 6.0
    out.b.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.cos([0.5, 1.0]), rtol=1e-6)
    with pytest.raises(OutSpecError, match=r"returned int at output\[1\]"):
        interop.wrap(lambda x: (x, 3), "jax", "torch")(torch.ones(2))


@pytest.mark.parametrize(
    "source", [pytest.param(s, marks=needs(s, "torch")) for s in ("jax", "tensorflow")]
)
def test_torch_integer_inputs_and_inputs_without_grad_get_none(source: str) -> None:
    torch = module("torch")
    x, w, _, _ = data("float32", seed=6)
    xt = torch.tensor(x)  # does not require grad
    wt = torch.tensor(w, requires_grad=True)
    index = torch.tensor([1, 3])
    take = {"jax": lambda a, i: a[i], "tensorflow": lambda a, i: module("tensorflow").gather(a, i)}
    f = model(source)
    bridged = interop.wrap(lambda x, w, i: take[source](f(x, w), i), source, "torch")
    out = bridged(xt, wt, index)
    assert out.shape == (2, 2) and out.requires_grad
    out.sum().backward()
    assert xt.grad is None and index.grad is None and not index.requires_grad
    wn = torch.tensor(w, requires_grad=True)
    model("torch")(xt, wn)[index].sum().backward()
    close(wt.grad.numpy(), wn.grad.numpy(), "float32")


@needs("torch", "jax")
def test_jax_integer_inputs_get_no_gradient_and_floats_do() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    bridged = interop.wrap(lambda x, i: (x[i] ** 2).sum(), "torch", "jax")
    x, i = jnp.arange(5.0), jnp.array([1, 4, 4])
    gx, gi = jax.grad(lambda x, i: bridged(x, i), argnums=(0, 1), allow_int=True)(x, i)
    np.testing.assert_allclose(np.asarray(gx), [0, 2, 0, 0, 16])
    assert gi.dtype == jax.dtypes.float0


@needs("torch", "jax")
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_torch_computes_gradients_only_of_the_inputs_jax_differentiates(mode: str) -> None:
    """`jax.grad(f, argnums=1)`: torch records a graph only from the second input (the others
    reach the function as plain tensors), and that gradient equals JAX's own."""
    jax, jnp, torch = module("jax"), module("jax.numpy"), module("torch")
    seen: list[list[bool]] = []

    def loss(w: Any, b: Any, x: Any) -> Any:
        seen.append([w.requires_grad, b.requires_grad, x.requires_grad])
        return (torch.tanh(x @ w + b) ** 2).sum()

    def native(w: Any, b: Any, x: Any) -> Any:
        return (jnp.tanh(x @ w + b) ** 2).sum()

    rng = np.random.default_rng(3)
    w, b, x = (jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in ((3, 2), (2,), (4, 3)))
    step = jax.grad(interop.wrap(loss, "torch", "jax"), argnums=1)
    step = jax.jit(step) if mode == "jit" else step
    for _ in range(2):  # the second jitted call runs the compiled step
        got = step(w, b, x)
    np.testing.assert_allclose(np.asarray(got), jax.grad(native, argnums=1)(w, b, x), rtol=1e-5)
    assert (jnp.asarray(got) * 2).shape == (2,)  # used in JAX
    recorded = [s for s in seen if any(s)]
    assert recorded, seen
    assert all(s == [False, True, False] for s in recorded), seen


@needs("jax", "tensorflow")
def test_tensorflow_integer_inputs_get_none_and_variables_get_gradients() -> None:
    tf = module("tensorflow")
    bridged = interop.wrap(lambda x, i: (x[i] ** 2).sum(), "jax", "tensorflow")
    v = tf.Variable([0.0, 1.0, 2.0, 3.0])
    i = tf.constant([1, 3, 3])
    with tf.GradientTape() as tape:
        tape.watch(i)
        y = bridged(v, i)
    gv, gi = tape.gradient(y, [v, i])
    np.testing.assert_allclose(gv.numpy(), [0, 2, 0, 12])
    assert gi is None


def argmax_and_sin(fw: str) -> Callable[[Any], Any]:
    m = module({"torch": "torch", "jax": "jax.numpy", "tensorflow": "tensorflow.math"}[fw])
    return lambda x: (m.sin(x), m.argmax(x))


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_integer_outputs_carry_no_gradient_and_leave_the_others_right(
    source: str, target: str
) -> None:
    x = np.array([0.1, 0.5, 0.2], np.float32)
    bridged = interop.wrap(argmax_and_sin(source), source, target)
    xs = tensor(target, x)
    if target == "torch":
        xs.requires_grad_(True)
        y, index = bridged(xs)
        y.sum().backward()
        grad = xs.grad
        assert not index.requires_grad
    elif target == "jax":
        jax = module("jax")
        index = bridged(xs)[1]
        grad = jax.jit(jax.grad(lambda x: bridged(x)[0].sum()))(xs)
    else:
        tf = module("tensorflow")
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y, index = bridged(xs)
        grad = tape.gradient(y, xs)
    assert int(used(target, index)) == 1 and "int" in str(used(target, index).dtype)
    np.testing.assert_allclose(used(target, grad), np.cos(x), rtol=1e-6)


# --- the measured hazards -----------------------------------------------------------------------
@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_complex_gradients_in_the_targets_convention(source: str, target: str) -> None:
    z = (np.array([1 + 2j, -0.5 + 0.3j, 0.2 - 1j])).astype("complex128")
    ct = np.array([0.3 - 1j, 1 + 0.5j, -2 + 0.1j])
    args, c = [tensor(target, z)], tensor(target, ct)
    _, (got,) = vjp(target, interop.wrap(complex_model(source), source, target), args, c)
    _, (want,) = vjp(target, complex_model(target), args, c)
    close(used(target, got), used(target, want), "complex128")
    # The test can fail: the source's own convention gives another answer.
    _, (theirs,) = vjp(source, complex_model(source), [tensor(source, z)], tensor(source, ct))
    if (source == "jax") != (target == "jax"):
        assert not np.allclose(used(source, theirs), used(target, want))


@pytest.mark.parametrize(
    "target", [pytest.param(t, marks=needs(t, "tensorflow")) for t in ("torch", "jax")]
)
def test_tensorflow_gathers_indexed_slices_arrive_dense(target: str) -> None:
    tf = module("tensorflow")
    params = np.arange(12.0).reshape(4, 3)
    index = np.array([0, 2, 2], dtype=np.int32)
    bridged = interop.wrap(lambda p, i: tf.reduce_sum(tf.gather(p, i) ** 2), "tensorflow", target)
    args = [tensor(target, params), tensor(target, index)]
    if target == "torch":
        args[0].requires_grad_(True)
        bridged(*args).backward()
        got = args[0].grad
    else:
        got = module("jax").grad(bridged)(*args)
    want = np.zeros_like(params)
    for i in index:
        want[i] += 2 * params[i]
    np.testing.assert_allclose(used(target, got), want)


@pytest.mark.parametrize(
    "target", [pytest.param(t, marks=needs(t, "torch")) for t in ("jax", "tensorflow")]
)
def test_a_torch_function_writing_into_its_inputs_leaves_the_callers_tensors_alone(
    target: str,
) -> None:
    def writer(x: Any) -> Any:
        x.mul_(10)  # in place, on what fn was given
        return x * x

    bridged = interop.wrap(writer, "torch", target)
    scalar = tensor(target, np.float32(1.0))  # TF caches small constants: the worst case
    vector = tensor(target, np.array([1.0, 2.0], np.float32))
    _, (g,) = vjp(target, bridged, [vector], tensor(target, np.ones(2, np.float32)))
    np.testing.assert_allclose(used(target, g), [200.0, 400.0])  # d(100 x²)/dx
    np.testing.assert_allclose(used(target, bridged(scalar)), 100.0)
    np.testing.assert_allclose(used(target, vector), [1.0, 2.0])
    np.testing.assert_allclose(used(target, scalar), 1.0)
    np.testing.assert_allclose(used(target, tensor(target, np.float32(1.0))), 1.0)


@pytest.mark.parametrize("source,target", TO_TORCH)
def test_torch_output_changed_in_place_before_backward_is_refused_as_natively(
    source: str, target: str
) -> None:
    torch = module("torch")
    exp = {
        "jax": lambda x: module("jax.numpy").exp(x),
        "tensorflow": lambda x: module("tensorflow").exp(x),
    }
    bridged = interop.wrap(exp[source], source, "torch")
    for f in (bridged, torch.exp):  # the native one is refused the same way
        x = torch.ones(3, requires_grad=True)
        y = f(x)
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    x = torch.ones(3, requires_grad=True)
    base = x * 1  # a non-leaf input, changed in place after the call
    y = bridged(base)
    base.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = bridged(x * 1)  # untouched: the gradient is right
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(1.0) * np.ones(3), rtol=1e-6)


@pytest.mark.parametrize("source,target", TO_TORCH)
def test_backward_twice_with_retain_graph(source: str, target: str) -> None:
    torch = module("torch")
    x, w, ct, _ = data("float64", seed=8)
    bridged = interop.wrap(model(source), source, "torch")
    xs = torch.tensor(x, requires_grad=True)
    y = bridged(xs, torch.tensor(w))
    y.backward(torch.tensor(ct), retain_graph=True)
    first = xs.grad.clone()
    y.backward(torch.tensor(ct))  # the source is asked a second time
    (want,) = torch.autograd.grad(model("torch")(xs, torch.tensor(w)), xs, torch.tensor(ct))
    close(first.numpy(), want.numpy(), "float64")
    close(xs.grad.numpy(), 2 * want.numpy(), "float64")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **TF_CPP, **env},
    )


@needs("torch", "jax", "tensorflow")
def test_jax_without_x64_refuses_float64_outputs_with_a_typed_error() -> None:
    done = run_python(
        """
        import interop, jax, jax.numpy as jnp, torch, tensorflow as tf
        assert not jax.config.read("jax_enable_x64")
        for fn, source in [(lambda x: x.double() * 2, "torch"),
                           (lambda x: tf.cast(x, tf.float64) * 2, "tensorflow")]:
            f = interop.wrap(fn, source, "jax")
            for call in (f, jax.jit(f), jax.grad(lambda x: f(x).sum())):
                try:
                    call(jnp.ones(3))
                except interop.UnsupportedDTypeError as exc:
                    assert "float64" in str(exc) and "jax_enable_x64" in str(exc), exc
                    assert "output leaf 0" in str(exc), exc
                else:
                    raise AssertionError(f"{source}: float64 narrowed silently")
        back = interop.wrap(lambda x: x * 2, "jax", "torch")

        def refused(why):
            try:
                back(torch.ones(2, dtype=torch.float64))
            except interop.UnsupportedDTypeError as exc:
                assert "argument leaf 0" in str(exc), exc
            else:
                raise AssertionError(why)

        refused("a float64 torch input reached JAX narrowed")
        # taken while x64 is on, a float64 input is refused again once it is off: how a dtype
        # crosses is remembered only where the switch cannot change it
        jax.config.update("jax_enable_x64", True)
        got = back(torch.ones(2, dtype=torch.float64))
        assert got.dtype == torch.float64 and got.tolist() == [2.0, 2.0], got
        jax.config.update("jax_enable_x64", False)
        refused("float64 narrowed after x64 was switched off again")
        print("ok")
        """,
        JAX_ENABLE_X64="0",
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("source,target", DIRECTIONS)
def test_an_exception_in_fn_reaches_the_caller_typed_and_naming_fn(
    source: str, target: str
) -> None:
    def broken(x: Any) -> Any:
        raise ValueError("boom in the bridged function")

    with pytest.raises(BridgedFunctionError, match="broken raised ValueError in") as info:
        interop.wrap(broken, source, target)(tensor(target, np.ones(2, np.float32)))
    assert isinstance(info.value.__cause__, ValueError)
    assert isinstance(info.value, interop.InteropError)


@needs("torch", "jax")
def test_a_failure_in_fns_backward_is_typed() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    torch = module("torch")
    zeta = interop.wrap(lambda x: torch.special.zeta(x, torch.ones_like(x)), "torch", "jax")
    with pytest.raises(BridgedFunctionError, match="gradient.*NotImplementedError"):
        jax.grad(lambda x: zeta(x).sum())(jnp.full(2, 2.0))


@needs("torch", "jax")
def test_under_jax_jit_a_failure_is_jaxs_runtime_error_and_names_fn() -> None:
    jax, jnp = module("jax"), module("jax.numpy")

    def negative_refused(x: Any) -> Any:
        if (x < 0).any():
            raise ValueError("negative input")
        return x * 2

    bridged = interop.wrap(negative_refused, "torch", "jax", out_spec=lambda x: x)
    np.testing.assert_allclose(np.asarray(jax.jit(bridged)(jnp.ones(2))), [2, 2])
    # JAX reports it (the XLA FFI handler's error, or its host callback's without the compiled
    # accelerator) as its own runtime error, naming the typed error and fn
    with pytest.raises(Exception, match="BridgedFunctionError") as info:
        jax.jit(bridged)(-jnp.ones(2)).block_until_ready()
    assert "negative_refused raised ValueError in torch: negative input" in str(info.value)


@needs("jax", "tensorflow")
def test_inside_tf_function_a_failure_names_fn() -> None:
    tf = module("tensorflow")

    def negative_refused(x: Any) -> Any:
        if (x < 0).any():
            raise ValueError("negative input")
        return x * 2

    bridged = tf.function(interop.wrap(negative_refused, "jax", "tensorflow", out_spec=lambda x: x))
    np.testing.assert_allclose(bridged(tf.ones(2)).numpy(), [2, 2])
    with pytest.raises(tf.errors.OpError, match="negative_refused raised ValueError in jax"):
        bridged(-tf.ones(2))


@needs("torch", "jax")
def test_jax_forward_mode_is_refused_with_a_typed_error() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    bridged = interop.wrap(lambda x: x.sin(), "torch", "jax")
    x = jnp.ones(3)
    for transform in (
        lambda: jax.jacfwd(bridged)(x),
        lambda: jax.jvp(bridged, (x,), (x,)),
        lambda: jax.hessian(lambda x: bridged(x).sum())(x),
    ):
        with pytest.raises(UnsupportedTransformError, match="forward-mode"):
            transform()
    # linearize traces through the reverse rule; JAX refuses only when its linear map runs,
    # after the bridge returned (as for any custom_vjp function): its own TypeError, as documented
    value, linear = jax.linearize(bridged, x)
    np.testing.assert_allclose(np.asarray(value), np.sin(np.ones(3)), rtol=1e-6)
    with pytest.raises(TypeError, match="forward-mode"):
        linear(x)
    np.testing.assert_allclose(
        np.asarray(jax.jacrev(bridged)(x)), np.diag(np.cos(np.ones(3))), rtol=1e-6
    )


@needs("jax", "torch")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")  # torch's forward AD
def test_torch_forward_mode_and_func_vmap_are_refused_with_typed_errors() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    fwad = module("torch.autograd.forward_ad")
    bridged = interop.wrap(lambda x: jnp.sin(x), "jax", "torch")
    with fwad.dual_level(), pytest.raises(UnsupportedTransformError, match="forward-mode"):
        bridged(fwad.make_dual(torch.ones(3), torch.ones(3)))
    with pytest.raises(UnsupportedTransformError, match="forward-mode"):
        torch.func.jvp(bridged, (torch.ones(3),), (torch.ones(3),))
    with pytest.raises(UnsupportedTransformError, match="vmap"):
        torch.func.vmap(bridged)(torch.ones(2, 3))
    grad = torch.func.grad(lambda x: bridged(x).sum())(torch.ones(3))  # reverse mode works
    np.testing.assert_allclose(grad.numpy(), np.cos(np.ones(3)), rtol=1e-6)
    # torch.compile: a custom operator has no forward formula, and torch gives zero tangents
    x, t = torch.ones(3), torch.ones(3)
    jvp = torch.compile(lambda x, t: torch.func.jvp(bridged, (x,), (t,)), fullgraph=True)
    jacfwd = torch.compile(torch.func.jacfwd(bridged), fullgraph=True)
    compiled = torch.compile(bridged, fullgraph=True)
    for transform in (lambda: jvp(x, t), lambda: jacfwd(x)):
        with pytest.raises(UnsupportedTransformError, match="forward-mode"):
            transform()
    with fwad.dual_level(), pytest.raises(UnsupportedTransformError, match="forward-mode"):
        compiled(fwad.make_dual(x, t))
    jacobian = torch.compile(lambda x: torch.autograd.functional.jacobian(bridged, x))
    np.testing.assert_allclose(jacobian(x).numpy(), np.diag(np.cos(np.ones(3))), rtol=1e-6)


@pytest.mark.parametrize("source", ["jax", "torch"])
def test_tf_function_jit_compile_is_refused_with_a_typed_error(source: str) -> None:
    pytest.importorskip(source)
    tf = pytest.importorskip("tensorflow")
    sin = {"jax": lambda x: module("jax.numpy").sin(x), "torch": lambda x: module("torch").sin(x)}
    bridged = interop.wrap(sin[source], source, "tensorflow")
    with pytest.raises(UnsupportedTransformError) as raised:
        tf.function(bridged, jit_compile=True)(tf.ones(3))
    message = str(raised.value)
    assert "cannot call back into Python" in message and "drop jit_compile" in message
    np.testing.assert_allclose(
        tf.function(bridged)(tf.ones(3)).numpy(), np.sin(np.ones(3)), rtol=1e-6
    )


@needs("torch", "tensorflow")
def test_tf_forward_accumulator_works_through_the_reverse_rule() -> None:
    tf, torch = module("tensorflow"), module("torch")
    bridged = interop.wrap(lambda x: torch.sin(x) * x, "torch", "tensorflow")
    x = tf.constant([0.5, 1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.ones(3)) as acc:
        y = bridged(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), (np.sin(x) + x * np.cos(x)).numpy(), rtol=1e-6)


# --- torch.compile: the bridge as a custom operator ---------------------------------------------
@pytest.mark.parametrize("source", ["jax", "tensorflow"], ids=["jax-torch", "tensorflow-torch"])
def test_torch_compile_fullgraph_matches_native_torch(source: str) -> None:
    pytest.importorskip(source)
    torch = pytest.importorskip("torch")
    scaled = model(source)
    bridged = interop.wrap(lambda x, w, scale: scaled(x, w) * scale, source, "torch")

    class Tiny(torch.nn.Module):
        def __init__(self, layer: Callable[..., Any], w: Any) -> None:
            super().__init__()
            self.layer, self.w = layer, torch.nn.Parameter(torch.tensor(w))

        def forward(self, x: Any, ct: Any) -> Any:
            return (self.layer(x, self.w, 0.5) * ct).sum()

    native = model("torch")
    for dtype in ("float32", "float64"):
        x, w, ct, _ = data(dtype, seed=2)
        runs = {}
        for how, layer in (("native", lambda x, w, s: native(x, w) * s), ("bridged", bridged)):
            for compiled in (False, True):
                net = Tiny(layer, w)
                xs = torch.tensor(x, requires_grad=True)
                call = torch.compile(net, fullgraph=True) if compiled else net
                loss = call(xs, torch.tensor(ct))
                loss.backward()
                runs[how, compiled] = [loss.detach().numpy(), xs.grad.numpy(), net.w.grad.numpy()]
        want = runs["native", False]
        for key in (("bridged", True), ("bridged", False), ("native", True)):
            for got, expected in zip(runs[key], want, strict=True):
                assert got.dtype == np.dtype(dtype)
                close(got * 1, expected, dtype)
    # per dtype: the bridge of scale 0.5, run by eager and compiled calls alike, and the one a
    # compiled graph finds its outputs' specs with (a float is traced as FLOAT_HINT, any value)
    hint = module("interop_torch.grad").FLOAT_HINT
    assert sorted(key[2][-1][1] for key in bridged._bridges) == sorted([0.5, 0.5, hint, hint])


@needs("jax", "torch")
def test_torch_compile_with_dynamic_shapes_specialises_the_shapes() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x: jnp.sin(x).sum(0), "jax", "torch")
    step = torch.compile(lambda x: bridged(x) * 2, fullgraph=True, dynamic=True)
    for n in (2, 3):
        x = torch.ones(n, 3, requires_grad=True)
        y = step(x)
        y.sum().backward()
        np.testing.assert_allclose((y * 1).detach().numpy(), np.full(3, 2 * n * np.sin(1.0)), 1e-6)
        np.testing.assert_allclose(x.grad.numpy(), np.full((n, 3), 2 * np.cos(1.0)), 1e-6)
    # every wrapped function runs through the same two operators: the registry does not grow
    assert {"bridge", "bridge_grad"} <= set(dir(torch.ops.interop))
    assert not [name for name in dir(torch.ops.interop) if "lambda" in name]


@needs("jax", "torch")
def test_torch_compile_names_a_call_site_by_one_int() -> None:
    """What a graph's call fixed when it was traced (the wrapped function, its layout, the ints
    traced with, whether it records) is one int argument: fewer arguments dispatch faster. A
    site holds no bridge: the same call traced again reuses it."""
    torch, jnp = module("torch"), module("jax.numpy")
    tg = module("interop_torch.grad")
    bridged = interop.wrap(lambda x, n: jnp.sin(x) * n, "jax", "torch")
    x = torch.ones(2, requires_grad=True)
    sites = []
    for _ in range(2):  # traced twice (two compiled functions)
        torch.compile(lambda x: bridged(x, 3).sum(), fullgraph=True)(x).backward()
        sites.append(len(tg._SITES))
    assert sites[0] == sites[1]
    np.testing.assert_allclose(x.grad.numpy(), np.full(2, 6 * np.cos(1.0)), 1e-6)

    def names(op: Any) -> list[str]:
        return [a.name for a in op.default._schema.arguments]

    assert names(torch.ops.interop.bridge) == ["site", "xs", "floats", "ints"]
    assert names(torch.ops.interop.bridge_grad) == ["site", "xs", "cts", "floats", "ints", "token"]


@needs("jax", "torch")
def test_torch_compile_keeps_the_forwards_pullback_for_its_gradient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gradient operator takes the recording forward's pullback (by token): it converts
    only the cotangents, not the inputs again; a token already used recomputes."""
    torch, jnp = module("torch"), module("jax.numpy")
    tg = module("interop_torch.grad")
    from interop import api

    bridged = interop.wrap(lambda x, w: jnp.tanh(x @ w), "jax", "torch")
    step = torch.compile(lambda x, w: bridged(x, w).sum() * 2, fullgraph=True)
    x, w = torch.linspace(-1, 1, 6).reshape(2, 3), torch.ones(3, 2, requires_grad=True)
    want = 2 * (1 - np.tanh(x.numpy() @ np.ones((3, 2))) ** 2)
    step(x, w).backward()  # traced and compiled
    moved: list[str] = []
    real = api.convert
    monkeypatch.setattr(api, "convert", lambda y, to, **k: moved.append(to) or real(y, to, **k))
    w.grad = None
    loss = step(x, w)
    forward = list(moved)
    loss.backward()  # the cotangent in, the gradients of x and w out (both are float)
    assert forward == ["numpy", "numpy", "torch"] and moved[3:] == ["numpy", "torch", "torch"]
    assert len(tg._STASH) == 0  # spent
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ want, 1e-5, 1e-6)
    w.grad = None
    many = tg.STASH_SIZE + 2
    losses = [step(x, w) for _ in range(many)]  # the oldest tokens are dropped
    assert len(tg._STASH) == tg.STASH_SIZE
    sum(losses).backward()  # a token not found: the gradient operator runs the rule again
    np.testing.assert_allclose(w.grad.numpy(), many * x.numpy().T @ want, 1e-5, 1e-5)
    with torch.no_grad():  # nothing records: no token, nothing kept
        assert step(x, w).item() == pytest.approx(2 * np.tanh(x.numpy() @ np.ones((3, 2))).sum())
    assert len(tg._STASH) == 0


@needs("jax", "torch")
def test_a_compiled_graphs_run_reaches_the_kernel_without_a_second_dispatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compiled graph calls `interop::bridge` through the dispatcher once: its autograd
    kernel calls the kernel itself for plain tensors and parameters; fake tensors (tracing) and
    subclasses go on through the dispatcher, below autograd."""
    torch, jnp = module("torch"), module("jax.numpy")
    tg = module("interop_torch.grad")
    bridged = interop.wrap(lambda x, w: jnp.tanh(x @ w), "jax", "torch")
    step = torch.compile(lambda x, w: bridged(x, w).sum(), fullgraph=True)
    x, w = torch.ones(2, 3), torch.nn.Parameter(torch.full((3, 2), 0.5))
    step(x, w).backward()  # traced and compiled
    below: list[int] = []
    real = tg._ops()
    monkeypatch.setattr(tg, "_ops", lambda: (lambda *a: below.append(1) or real[0](*a), real[1]))
    w.grad = None
    step(x, w).backward()
    assert below == []  # a run: the kernel, called from the autograd kernel
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 2 * (1 - np.tanh(1.5) ** 2)), 1e-6)
    assert tg._nothing_below(torch, [x, w.detach()], [])
    fake_mode = module("torch._subclasses.fake_tensor").FakeTensorMode
    with fake_mode() as mode:
        assert not tg._nothing_below(torch, [mode.from_tensor(x)], [])

    class Marked(torch.Tensor):
        pass

    assert not tg._nothing_below(torch, [x.as_subclass(Marked)], [])


@needs("jax", "torch")
def test_torch_compile_with_an_out_spec_per_call() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x: jnp.sin(x), "jax", "torch", out_spec=lambda x: x)
    step = torch.compile(lambda x: bridged(x) * 2, fullgraph=True)
    for n in (2, 3, 2, 4):  # each shape its own spec: a graph runs the bridge of its own
        x = torch.ones(n, requires_grad=True)
        y = step(x)
        y.sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), np.full(n, 2 * np.sin(1.0)), rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), np.full(n, 2 * np.cos(1.0)), rtol=1e-6)


@needs("jax", "torch")
def test_torch_compile_of_a_function_wrapped_before_torch_was_imported() -> None:
    done = run_python(
        """
        import json, sys, interop, jax.numpy as jnp
        f = interop.wrap(lambda x: jnp.sin(x), "jax", "torch")
        import torch
        g = interop.wrap(lambda x: jnp.cos(x), "jax", "torch")
        g(torch.ones(2))  # wrapping and eager calls leave torch._dynamo unimported
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
        x = torch.ones(3, requires_grad=True)
        y = torch.compile(lambda x: f(x) * 2, fullgraph=True)(x)
        y.sum().backward()
        print(json.dumps([(y + 1).tolist(), x.grad.tolist()]))
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "no dynamo"
    values, grads = json.loads(lines[-1])
    np.testing.assert_allclose(values, 2 * np.sin(np.ones(3)) + 1, rtol=1e-6)
    np.testing.assert_allclose(grads, 2 * np.cos(np.ones(3)), rtol=1e-6)


@needs("jax", "torch")
def test_torch_compile_takes_every_value_of_a_python_number() -> None:
    # Dynamo makes a number symbolic once it changes; more values than its recompile limit (8)
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x, s, n: jnp.sin(x) * s + n, "jax", "torch")
    step = torch.compile(lambda x, s, n: bridged(x, s, n).sum(), fullgraph=True)
    for i in range(12):
        s, n = 0.5 + i, i
        x = torch.linspace(0, 1, 3, requires_grad=True)
        y = step(x, s, n)
        y.backward()
        want = np.sin(np.linspace(0, 1, 3, dtype=np.float32))
        np.testing.assert_allclose((y * 1).item(), (want * s + n).sum(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), s * np.cos(np.linspace(0, 1, 3)), rtol=1e-5)


@needs("jax", "torch")
def test_torch_compile_refuses_a_number_that_changes_the_outputs_shapes() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x, n: jnp.tile(x, n), "jax", "torch")
    step = torch.compile(lambda x, n: bridged(x, n) * 2, fullgraph=True)
    for n in (1, 2):  # the second call traces n as a symbol, with 2 as its example
        assert step(torch.ones(3), n).tolist() == [2.0] * 3 * n
    with pytest.raises(OutSpecError, match="dynamic=False"):
        step(torch.ones(3), 3)
    fixed = torch.compile(lambda x, n: bridged(x, n) * 2, fullgraph=True, dynamic=False)
    for n in (1, 2, 3):
        assert fixed(torch.ones(3), n).tolist() == [2.0] * 3 * n


@needs("jax", "torch")
def test_torch_compile_keeps_nothing_of_a_wrapped_function_once_it_is_gone() -> None:
    done = run_python(
        """
        import gc, json, resource, weakref, interop, jax.numpy as jnp, numpy as np, torch

        def rss_mb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize() / 2**20

        def once(i):
            big = np.full(5_000_000, float(i), np.float32)  # 20 MB, closed over
            def fn(x):
                return jnp.sin(x) * big[:3].copy()
            f = interop.wrap(fn, "jax", "torch")
            x = torch.ones(3, requires_grad=True)
            torch.compile(lambda x: f(x).sum(), fullgraph=True)(x).backward()
            assert x.grad.tolist() == [float(i) * np.cos(1.0).astype(np.float32)] * 3
            return weakref.ref(fn)

        rss = []
        for i in range(8):
            alive = once(i)
            torch._dynamo.reset()  # as a user would: the compiled code is gone
            gc.collect()
            rss.append(rss_mb())
            assert alive() is None, f"step {i}: the wrapped function is still alive"
        packets = {n: getattr(torch.ops.interop, n) for n in dir(torch.ops.interop)}
        ops = sorted(n for n, p in packets.items() if isinstance(p, torch._ops.OpOverloadPacket))
        print(json.dumps([rss, ops]))
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rss, ops = json.loads(done.stdout.strip().splitlines()[-1])
    assert ops == ["bridge", "bridge_grad"]  # two operators, whatever was wrapped
    # 20 MB a step if kept (23 MB measured before the fix); the first step's growth is the
    # allocators' and compilers' warm-up
    assert rss[-1] - rss[1] < 20, rss


def jax_layer_module(torch: Any, bridged: Callable[..., Any]) -> Any:
    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(-1, 1, 6).reshape(3, 2))

        def forward(self, x: Any) -> Any:
            return bridged(x, self.w).sum()

    return Layer()


@needs("jax", "torch")
def test_torch_export_runs_the_bridge_and_strict_export_is_refused_naming_the_remedy() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x, w: jnp.tanh(x @ w), "jax", "torch")
    layer, x = jax_layer_module(torch, bridged), torch.linspace(0, 1, 12).reshape(4, 3)
    exported = torch.export.export(layer, (x,))  # strict=False, torch's default
    calls = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert torch.ops.interop.bridge.default in calls
    run = exported.module()
    np.testing.assert_allclose(
        run(x).item(), np.tanh(x.numpy() @ layer.w.detach().numpy()).sum(), 1e-6
    )
    with pytest.raises(torch._dynamo.exc.Unsupported, match="export with strict=False"):
        torch.export.export(layer, (x,), strict=True)
    del layer, bridged
    gc.collect()
    with pytest.raises(BridgedFunctionError, match="no longer exists in this process"):
        run(x)


@needs("jax", "torch")
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_torch_compile_modes_on_the_cpu_match_eager(mode: str) -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x, w: jnp.tanh(x @ w), "jax", "torch")
    x = torch.linspace(0, 1, 12).reshape(4, 3)
    runs = []
    for call in (lambda m: m, lambda m: torch.compile(m, mode=mode, fullgraph=True)):
        layer = jax_layer_module(torch, bridged)
        step = call(layer)
        for _ in range(2):  # the second step runs the compiled graph
            layer.zero_grad()
            loss = step(x)
            loss.backward()
        runs.append([loss.item(), layer.w.grad.numpy().copy()])
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-6)


@needs("jax", "torch")
def test_a_compiled_wrapped_call_from_several_threads() -> None:
    import threading

    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x, s: jnp.sin(x) * s, "jax", "torch")
    step = torch.compile(lambda x, s: bridged(x, s) + 1, fullgraph=True)
    x = torch.linspace(0, 1, 5)
    step(x, 1.0), step(x, 2.0)  # compiled, with the float symbolic
    wrong: list[Any] = []

    def work(i: int) -> None:
        try:
            for k in range(10):
                s = float(3 + i * 10 + k)
                got = step(x, s).numpy()
                if not np.allclose(got, np.sin(x.numpy()) * s + 1, rtol=1e-5):
                    wrong.append((s, got))
        except Exception as exc:  # reported below, with the thread's value
            wrong.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not wrong, wrong[:3]


# --- threads: the called framework's pool inside the caller's runtime ----------------------------
@needs("torch", "jax")
def test_torch_runs_on_one_thread_inside_jax_jit_unless_told_otherwise() -> None:
    torch, jax = module("torch"), module("jax")
    seen: list[int] = []

    def fn(x: Any) -> Any:
        seen.append(torch.get_num_threads())
        return torch.sin(x) * 1

    before = torch.get_num_threads()
    torch.set_num_threads(3)  # not what the bridge sets, not what the test ends with
    spec = jax.ShapeDtypeStruct((3,), "float32")  # fn runs on data only, in the callbacks
    try:
        x = jax.numpy.ones(3, "float32")
        for wrapped, want in (
            (interop.wrap(fn, "torch", "jax", out_spec=spec), 1),
            (interop.wrap(fn, "torch", "jax", out_spec=spec, threads=2), 2),
            (interop.wrap(fn, "torch", "jax", out_spec=spec, threads=0), 3),
        ):
            seen.clear()
            grad = jax.jit(jax.grad(lambda x, f=wrapped: f(x).sum()))(x)  # forward and backward
            np.testing.assert_allclose(np.asarray(grad + 0), np.cos(np.ones(3)), rtol=1e-6)
            assert seen and set(seen) == {want}
            assert torch.get_num_threads() == 3  # restored after each call
        os.environ["INTEROP_BRIDGE_THREADS"] = "2"
        seen.clear()
        jax.jit(interop.wrap(fn, "torch", "jax", out_spec=spec))(x).block_until_ready()
        assert seen == [2]
        os.environ["INTEROP_BRIDGE_THREADS"] = "many"
        with pytest.raises(interop.errors.InvalidArgumentError, match="INTEROP_BRIDGE_THREADS"):
            interop.wrap(fn, "torch", "jax")
        with pytest.raises(interop.errors.InvalidArgumentError, match="threads"):
            interop.wrap(fn, "torch", "jax", threads=-1)
    finally:
        os.environ.pop("INTEROP_BRIDGE_THREADS", None)
        torch.set_num_threads(before)


# --- JAX's transformations, out_spec, structure of the machinery --------------------------------
@needs("torch", "jax")
def test_inside_jax_vmap_and_scan() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    torch = module("torch")
    bridged = interop.wrap(lambda x: (torch.sin(x) * x).sum(), "torch", "jax")
    native = lambda x: (jnp.sin(x) * x).sum()  # noqa: E731
    xs = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    close(
        np.asarray(jax.vmap(jax.grad(bridged))(xs)),
        np.asarray(jax.vmap(jax.grad(native))(xs)),
        "float32",
    )

    def scanned(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda xs: jax.lax.scan(lambda c, x: (c + f(x), None), 0.0, xs)[0]

    for run in (jax.grad, lambda f: jax.jit(jax.grad(f))):
        close(
            np.asarray(run(scanned(bridged))(xs)), np.asarray(run(scanned(native))(xs)), "float32"
        )


@needs("torch", "jax")
def test_out_spec_when_the_source_cannot_tell_shapes_ahead() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    torch = module("torch")

    def positive_part(x: Any) -> Any:
        return x[x > 0] * 2  # the shape depends on the values

    x = jnp.array([1.0, -1.0, 2.0], dtype=jnp.float32)
    bridged = interop.wrap(positive_part, "torch", "jax")
    np.testing.assert_allclose(np.asarray(bridged(x)), [2.0, 4.0])  # eager: no spec needed
    with pytest.raises(OutSpecError, match="out_spec"):
        jax.jit(bridged)(x)
    spec = jax.ShapeDtypeStruct((2,), jnp.float32)
    announced = interop.wrap(positive_part, "torch", "jax", out_spec=spec)
    np.testing.assert_allclose(np.asarray(jax.jit(announced)(x)), [2.0, 4.0])
    grad = jax.jit(jax.grad(lambda x: announced(x).sum()))(x)
    np.testing.assert_allclose(np.asarray(grad), [2.0, 0.0, 2.0])
    wrong = interop.wrap(positive_part, "torch", "jax", out_spec=((3,), "float32"))
    with pytest.raises(OutSpecError, match="out_spec announced"):
        wrong(x)
    del torch


@needs("torch", "tensorflow")
def test_an_out_spec_of_unknown_size_is_refused_naming_it() -> None:
    """A `tf.TensorSpec` with a None dimension (as `input_signature` gives) cannot size an
    output: refused when wrapping, and from inside `tf.function`, where the bridge without
    an out_spec infers the sizes itself."""
    tf, torch = module("tensorflow"), module("torch")
    with pytest.raises(OutSpecError, match=r"shape \(None, 3\) has a dimension of unknown size"):
        interop.wrap(torch.sin, "torch", "tensorflow", out_spec=tf.TensorSpec([None, 3]))
    signature = [tf.TensorSpec([None], tf.float32)]
    echoed = interop.wrap(lambda x: torch.sin(x), "torch", "tensorflow", out_spec=lambda x: x)
    with pytest.raises(OutSpecError, match="leave out_spec out"):
        tf.function(lambda x: echoed(x), input_signature=signature)(tf.ones(3))
    inferred = interop.wrap(lambda x: torch.sin(x), "torch", "tensorflow")
    y = tf.function(lambda x: inferred(x) * 2, input_signature=signature)(tf.ones(3))
    np.testing.assert_allclose(y.numpy(), 2 * np.sin(np.ones(3)), rtol=1e-6)


@needs("torch", "jax")
def test_the_custom_rule_is_built_once_per_argument_structure() -> None:
    jax, jnp = module("jax"), module("jax.numpy")
    torch = module("torch")
    bridged = interop.wrap(lambda x, s: torch.sin(x) * s, "torch", "jax")
    grad = jax.jit(jax.grad(lambda x: bridged(x, 2.0).sum()))
    for n in (3, 3, 5):
        grad(jnp.ones(n))
        bridged(jnp.ones(n), 2.0)
    (only,) = bridged._bridges.values()  # traced or concrete, any shape: one bridge, one rule
    rule = only.state["jax"]
    grad(jnp.ones(4))
    assert only.state["jax"] is rule
    bridged(jnp.ones(3), 3.0)
    bridged(jnp.ones(3), 3)  # 3 and 3.0 are different constants
    assert len(bridged._bridges) == 3


def test_a_dtypes_name_is_read_once_per_dtype() -> None:
    """NumPy's `dtype.name` is Python code (2 µs): asked per input and output of every call."""
    from interop.grad import dtype_name

    asked: list[Any] = []

    class Dtype:
        __hash__ = object.__hash__

        @property
        def name(self) -> str:
            asked.append(self)
            return "float32"

    class Unhashable(Dtype):
        __hash__ = None  # type: ignore[assignment]

    first, second, loose = Dtype(), Dtype(), Unhashable()
    names = [dtype_name(d) for d in (first, first, second, loose, loose)]
    assert names == ["float32"] * 5 and asked == [first, second, loose, loose]
    assert [dtype_name(d) for d in (np.dtype("float32"), np.dtype(">f4"), "torch.int8")] == [
        "float32",
        "float32",
        "int8",
    ]


@needs("torch", "jax")
def test_a_call_of_tensors_finds_its_bridge_without_walking_its_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import interop.grad as grad

    jnp, torch = module("jax.numpy"), module("torch")
    bridged = interop.wrap(lambda x, w: jnp.sum(x * w), "jax", "torch")
    x, w = torch.ones(3), torch.arange(3.0, requires_grad=True)
    assert bridged(x, w).item() == 3.0
    (bridge,) = bridged._bridges.values()
    walked: list[Any] = []
    real = grad.flatten
    monkeypatch.setattr(grad, "flatten", lambda tree: walked.append(tree) or real(tree))
    assert bridged.bridge_for((x, w))[0] is bridge and walked == []  # the key, made directly
    nested = bridged.bridge_for((x, [w]))[0]  # another structure: walked, its own bridge
    assert nested is not bridge and len(walked) == 1
    assert bridged.bridge_for((x, w.double()))[0] not in (bridge, nested)  # another dtype
    assert bridged.bridge_for((x, 2.0))[0] not in (bridge, nested)  # a constant: walked
    assert len(walked) == 3 and len(bridged._bridges) == 4
    assert list(bridged._bridges.values())[-1] is not bridge
    bridged.bridge_for((x, w))
    assert list(bridged._bridges.values())[-1] is bridge  # found: the most recently used


@needs("torch", "jax")
def test_nothing_is_kept_alive_after_backward() -> None:
    torch, jnp = module("torch"), module("jax.numpy")
    bridged = interop.wrap(lambda x: jnp.exp(x), "jax", "torch")
    x = torch.ones(1000, requires_grad=True)
    y = bridged(x)
    alive = weakref.ref(y)
    y.sum().backward()
    del y
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("source,target", [direction("jax", "torch"), direction("torch", "jax")])
def test_repeated_steps_leave_no_jax_arrays_behind(source: str, target: str) -> None:
    jax = module("jax")
    x, w, ct, _ = data("float32", seed=7)
    bridged = interop.wrap(model(source), source, target)
    args, c = [tensor(target, x), tensor(target, w)], tensor(target, ct)

    def live_after(steps: int) -> int:
        for _ in range(steps):
            vjp(target, bridged, args, c)
        gc.collect()
        return len(jax.live_arrays())

    before = live_after(3)
    assert live_after(20) == before


def gpu_missing() -> str | None:
    """Why the CUDA case cannot run here, or None."""
    if not (INSTALLED["torch"] and INSTALLED["jax"]):
        return "torch and jax are needed"
    if not module("torch").cuda.is_available():
        return "torch sees no CUDA device"
    try:
        module("jax").devices("gpu")
    except RuntimeError as exc:
        return f"jax sees no GPU: {exc}"
    return None


@pytest.mark.cuda
def test_on_gpu_tensors_stay_on_the_device_and_gradients_match() -> None:
    why = gpu_missing()
    if why:
        pytest.skip(why)
    torch, jax, jnp = module("torch"), module("jax"), module("jax.numpy")
    x = torch.linspace(-1.0, 1.0, 6, device="cuda").requires_grad_(True)
    y = interop.wrap(lambda a: jnp.sin(a) * a, "jax", "torch")(x)
    assert y.device.type == "cuda"
    y.sum().backward()
    want = (torch.sin(x) + x * torch.cos(x)).detach()
    assert x.grad.device.type == "cuda" and torch.allclose(x.grad, want, atol=1e-6)
    g = jax.grad(lambda a: interop.wrap(lambda t: torch.sin(t) * t, "torch", "jax")(a).sum())
    xj = jax.device_put(jnp.linspace(-1.0, 1.0, 6), jax.devices("gpu")[0])
    got = g(xj)
    assert got.devices() == xj.devices()
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(jnp.sin(xj) + xj * jnp.cos(xj)), atol=1e-6
    )


def test_wrap_imports_no_framework_and_refuses_unknown_ones() -> None:
    done = run_python(
        """
        import sys, interop
        f = interop.wrap(lambda x: x, "torch", "tf")
        g = interop.wrap(len, "jax", "jax")
        assert g is len, "within one framework the function is returned as it is"
        try:
            interop.wrap(len, "torch", "mxnet")
        except interop.UnknownFrameworkError as exc:
            assert "mxnet" in str(exc)
        else:
            raise AssertionError("unknown target accepted")
        for source, fn, kind in (
            (["jax"], len, interop.UnknownFrameworkError),  # not a list's unhashable TypeError
            ("jax", 42, interop.InvalidArgumentError),
        ):
            try:
                interop.wrap(fn, source, "torch")
            except kind:
                pass
            else:
                raise AssertionError(f"wrap({fn!r}, {source!r}) accepted")
        loaded = [m for m in ("torch", "jax", "tensorflow", "numpy") if m in sys.modules]
        assert not loaded, loaded
        print("ok")
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@needs("torch", "tensorflow")
def test_unaligned_torch_tensors_reach_tensorflow_source_aligned() -> None:
    # TensorFlow's kernels abort the process on buffers not 64-byte aligned: run it apart.
    done = run_python(
        """
        import numpy as np, torch, tensorflow as tf, interop
        base = torch.arange(40, dtype=torch.float32)
        x = base[1:17].clone()[1:]  # a view 4 bytes into an allocation: not 64-byte aligned
        assert x.data_ptr() % 64 != 0
        x.requires_grad_(True)
        f = interop.wrap(lambda t: tf.reduce_sum(tf.sin(t) * t), "tf", "torch")
        f(x).backward()
        want = (torch.sin(x) + x * torch.cos(x)).detach()
        assert torch.allclose(x.grad, want), (x.grad, want)
        print("ok")
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stderr[-3000:])


@needs("torch", "tensorflow")
def test_a_one_element_tensorflow_output_reaches_torch_without_tensorflows_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `convert` copies a one-element TF tensor for torch (TF shares equal scalar constants'
    # buffers) on the engine's full path, 100+ µs; the bridge's output crosses as a NumPy copy.
    torch, tf = module("torch"), module("tensorflow")
    from interop.registry import REGISTRY

    def refused(x: Any) -> Any:
        raise AssertionError("TensorFlow's own copy was taken")

    monkeypatch.setattr(REGISTRY.get("tensorflow"), "copy", refused)
    f = interop.wrap(lambda t: tf.reduce_sum(t * t), "tf", "torch")
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    y = f(x)
    y.backward()
    assert y.item() == 2.5
    torch.testing.assert_close(x.grad, torch.tensor([1.0, 3.0]))
    unrecorded = f(x.detach())
    unrecorded.add_(1.0)  # torch's own memory: no TF constant changes with it
    assert unrecorded.item() == 3.5
    assert float(tf.constant(2.5)) == 2.5


@needs("torch", "tensorflow")
def test_a_one_element_cotangent_reaches_a_torch_source_without_tensorflows_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A loss's cotangent from TF is one element, which `convert` shares into torch only as a
    # copy (TF's own, on the engine's full path: 100+ µs); the torch source takes a NumPy copy.
    tf = module("tensorflow")
    from interop.registry import REGISTRY

    def refused(x: Any) -> Any:
        raise AssertionError("TensorFlow's own copy was taken")

    monkeypatch.setattr(REGISTRY.get("tensorflow"), "copy", refused)
    f = interop.wrap(lambda t: (t * t).sum(), "torch", "tf")
    x = tf.constant([0.5, 1.5])

    def step(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = 3.0 * f(x)
        return y, tape.gradient(y, x)

    for run in (step, tf.function(step)):
        y, g = run(x)
        assert float(y) == 7.5
        np.testing.assert_allclose(g.numpy(), [3.0, 9.0])
