"""What one forward+backward through `interop.wrap` costs, against its floor (the same step
with no bridge) and against the target framework's own autodiff doing the same math, for every
direction among torch, JAX and TensorFlow; and a new user's torch model with a JAX layer.

    python -m benchmarks.grad              # sizes 16 and 1e5, every installed direction, model
    python -m benchmarks.grad --quick      # fewer rounds, size 16 (a minute or two)
    python -m benchmarks.grad --json out.json --directions torch-jax,jax-torch --model no
    python -m benchmarks.grad --jit-paths  # a torch MLP under jax.jit: FFI, callback, native, torch
    python -m benchmarks.grad --attribute jax-torch:eager --clock cpu  # conversions knocked out

The math is `sum(sin(x) * x)` for a float32 vector `x`: written natively in the target, and in
the source then wrapped. One step is the value and the gradient of `x`:
`torch.autograd.grad` (eager, and of `torch.compile(f, fullgraph=True)`: the bridge is then a
custom operator in the compiled graph), `jax.grad` (eager and under `jax.jit`),
`tf.GradientTape` (eager and inside `tf.function`); JAX results are waited on.

The **floor** of a bridged step is that step with the bridge taken out: the same wrapped call
through the target's own mechanism (its custom-gradient rule, the torch custom operator, the XLA
custom call, `tf.py_function`), whose source side only runs the source framework's own forward
and backward of the math on tensors made ahead, and hands back outputs and gradients made ahead
(`FloorSource`): no conversion, no copy, no clone. What the bridged step costs beyond it is the
bridge's. The three steps run in the same interleaved rounds (see `timing.py`); the report gives
the medians of the per-round ratios and differences. Each bridged gradient is checked against the
native one before it is timed.

Where the bridged step is furthest over its floor (JAX into torch and into TensorFlow, eager), it
is also measured against the same step **by hand** (`by_hand`): the target's custom-gradient
mechanism calling JAX's jitted forward and VJP, the tensors crossing through the frameworks' own
DLPack calls — what a user writes without interop.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from interop.grad import Source, TensorSpec, dtype_name

from . import timing
from .env import machine
from .timing import Case, interleaved, paired

FRAMEWORKS = ("torch", "jax", "tensorflow")


def math_in(framework: str) -> Callable[[Any], Any]:
    """`sum(sin(x) * x)` written with `framework`'s own API."""
    if framework == "torch":
        import torch

        return lambda x: (torch.sin(x) * x).sum()
    if framework == "jax":
        import jax.numpy as jnp

        return lambda x: (jnp.sin(x) * x).sum()
    import tensorflow as tf

    return lambda x: tf.reduce_sum(tf.sin(x) * x)


def steps(target: str, f: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """One value-and-gradient step of `f` per mode the target has."""
    if target == "torch":
        import torch

        def eager(x: Any) -> Any:
            y = f(x)
            return y, torch.autograd.grad(y, x)[0]

        compiled_f = torch.compile(f, fullgraph=True)

        def compiled(x: Any) -> Any:  # the forward compiled, its backward compiled alongside
            y = compiled_f(x)
            return y, torch.autograd.grad(y, x)[0]

        return {"eager": eager, "torch.compile": compiled}
    if target == "jax":
        import jax

        grad = jax.value_and_grad(f)
        jitted = jax.jit(grad)
        return {
            "eager": lambda x: jax.block_until_ready(grad(x)),
            "jit": lambda x: jax.block_until_ready(jitted(x)),
        }
    import tensorflow as tf

    def tape(x: Any) -> Any:
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        return y, t.gradient(y, x)

    return {"eager": tape, "tf.function": tf.function(tape)}


def make(target: str, n: int) -> Any:
    import numpy as np

    values = np.linspace(-2.0, 2.0, n, dtype=np.float32)
    if target == "torch":
        import torch

        return torch.tensor(values).requires_grad_(True)  # torch's own (aligned) memory
    if target == "jax":
        import jax.numpy as jnp

        return jnp.asarray(values)
    import tensorflow as tf

    return tf.constant(values)


def as_numpy(value: Any) -> Any:
    import numpy as np

    return np.asarray(value.detach() if hasattr(value, "detach") else value)


class Native:
    """`f`'s own forward and backward in its framework, on pre-made tensors `xs` with the
    cotangent `ct` of its one output: what any bridge of `f` must run (a floor's source part).
    JAX runs both jitted (as the JAX source does) and is waited on."""

    def __init__(self, framework: str, f: Callable[..., Any], xs: list[Any], ct: Any) -> None:
        self.framework, self.f, self.ct = framework, f, ct
        if framework == "torch":
            self.xs = [x.detach().requires_grad_(True) for x in xs]
        elif framework == "jax":
            import jax

            self.xs = xs
            self.jitted = jax.jit(f)
            self.pulled = jax.jit(lambda xs, ct: jax.vjp(f, *xs)[1](ct))
        else:
            self.xs = xs

    def run(self) -> Any:
        """The forward, no gradient recorded."""
        if self.framework == "torch":
            import torch

            with torch.no_grad():
                return self.f(*self.xs)
        if self.framework == "jax":
            import jax

            return jax.block_until_ready(self.jitted(*self.xs))
        return self.f(*self.xs)

    def forward(self) -> Any:
        """The forward, recorded for `backward` (JAX records nothing: its pullback recomputes)."""
        if self.framework == "torch":
            import torch

            with torch.enable_grad():
                return self.f(*self.xs)
        if self.framework == "jax":
            return self.run()
        import tensorflow as tf

        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(self.xs)
            y = self.f(*self.xs)
        return tape, y

    def backward(self, state: Any) -> Any:
        """The gradients of every input, from `forward`'s state (JAX: none, it recomputes)."""
        if self.framework == "torch":
            import torch

            return torch.autograd.grad(state, self.xs, self.ct)
        if self.framework == "jax":
            import jax

            return jax.block_until_ready(self.pulled(self.xs, self.ct))
        tape, y = state
        return tape.gradient(y, self.xs, output_gradients=self.ct)


class FloorSource(Source):
    """A source that runs only `native`'s forward and backward, where the bridge would run the
    wrapped function, and hands the target pre-made outputs and gradients (`outs`, `grads`,
    tensors of the target): no conversion, no copy. Wrapped with the real target, it is the
    bridged step less the bridge: the floor (the target's own mechanism — its custom-gradient
    rule, custom operator, XLA custom call or `py_function` — plus the source's own work)."""

    def __init__(
        self, real: Source, target: Any, native: Native, outs: list[Any], grads: list[Any]
    ):
        self.name, self.conj_vjp = real.name, real.conj_vjp
        self.real, self.target, self.native = real, target, native
        self.outs, self.grads = outs, grads
        self.converted: dict[tuple[int, str], Any] = {}
        self.rule = self.vjp  # one bound method: `call` knows it

    def tensor_types(self) -> tuple[type, ...]:
        return tuple(self.target.tensor_types())

    def threads(self, count: int) -> Any:
        return self.real.threads(count)

    def take(self, x: Any) -> Any:
        return x

    def give(self, y: Any, to: str) -> Any:
        if to == self.target.name:
            return y.detach() if hasattr(y, "detach") else y  # torch: a fresh tensor object
        found = self.converted.get((id(y), to))
        if found is None:  # made once: the FFI path asks for NumPy
            import interop

            found = self.converted[id(y), to] = interop.convert(y, to, copy=True)
        return found

    def call(self, fn: Any, xs: list[Any], owned: bool = False) -> list[Any]:
        if fn is not self.rule:  # the reverse rule runs its own forward and backward
            self.native.run()
        return list(fn(xs))

    def forward(
        self,
        fn: Any,
        xs: list[Any],
        diff: list[bool],
        out_diff: Any,
        conj: bool,
        owned: bool = False,
    ) -> tuple[list[Any], Any]:
        state = self.native.forward()
        ys = list(fn(xs))

        def pullback(cts: list[Any]) -> list[Any]:
            self.native.backward(state)
            return list(self.grads)

        return ys, pullback

    def vjp(self, args: list[Any]) -> list[Any]:
        self.native.backward(self.native.forward() if self.native.framework != "jax" else None)
        return list(self.grads)

    def vjp_fn(self, fn: Any, diff: list[bool], out_diff: list[bool], conj: bool) -> Any:
        return self.rule

    def out_specs(self, fn: Any, specs: list[Any]) -> list[Any]:
        fn([None] * len(specs))  # the flat function records its outputs' structure
        return [TensorSpec(tuple(int(d) for d in o.shape), dtype_name(o.dtype)) for o in self.outs]


def floor_of(wrapped: Any, native: Native, out: Any, grads: list[Any]) -> Any:
    """`wrapped` (an `interop.wrap` of one output) with its source replaced by `native`'s work,
    returning `out` and gradients `grads` (target tensors, computed ahead)."""
    from interop.grad import Wrapped

    out = out.detach() if hasattr(out, "detach") else out
    source = FloorSource(wrapped.source, wrapped.target, native, [out], grads)
    return Wrapped(lambda *args: out, source, wrapped.target)


def source_tensors(source: str, n: int) -> tuple[list[Any], Any]:
    """The input of the math and its output's cotangent, made in `source` ahead."""
    import numpy as np

    import interop

    x = interop.convert(np.linspace(-2.0, 2.0, n, dtype=np.float32), source, copy=True)
    ct = interop.convert(np.ones((), np.float32), source, copy=True)
    return [x], ct


def measure(
    source: str, target: str, sizes: tuple[int, ...], rounds: int, batch_ns: float
) -> list[dict[str, Any]]:
    import numpy as np

    import interop

    native = steps(target, math_in(target))
    wrapped = interop.wrap(math_in(source), source, target)
    bridged = steps(target, wrapped)
    made_by_hand = by_hand(source, target, math_in(source))
    hand = None if made_by_hand is None else steps(target, made_by_hand)["eager"]
    rows = []
    for n in sizes:
        x = make(target, n)
        value, grad = steps(target, math_in(target))["eager"](x)
        xs, ct = source_tensors(source, n)
        floor_fn = floor_of(wrapped, Native(source, math_in(source), xs, ct), value, [grad])
        floor = steps(target, floor_fn)
        for mode in native:
            want, got = native[mode](x), bridged[mode](x)
            ok = np.allclose(as_numpy(want[1]), as_numpy(got[1]), rtol=1e-4, atol=1e-4)
            scope = {"native": native[mode], "bridged": bridged[mode], "floor": floor[mode]}
            if hand is not None and mode == "eager":
                scope["by_hand"] = hand
                got = hand(x)
                ok = ok and np.allclose(as_numpy(want[1]), as_numpy(got[1]), rtol=1e-4, atol=1e-4)
            cases = {name: Case(f"{name}(x)", x, scope) for name in scope}
            stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns, max_batch=10_000)
            ratio, diff = paired(stats["bridged"], stats["native"])
            over_floor, beyond = paired(stats["bridged"], stats["floor"])
            rows.append(
                {
                    "source": source,
                    "target": target,
                    "mode": mode,
                    "n": n,
                    "native_us": stats["native"].median / 1e3,
                    "floor_us": stats["floor"].median / 1e3,
                    "bridged_us": stats["bridged"].median / 1e3,
                    "added_us": diff / 1e3,
                    "ratio": ratio,
                    "beyond_floor_us": beyond / 1e3,
                    "floor_ratio": over_floor,
                    "gradient_matches": bool(ok),
                }
            )
            if "by_hand" in stats:
                over_hand, _ = paired(stats["bridged"], stats["by_hand"])
                rows[-1].update(by_hand_us=stats["by_hand"].median / 1e3, over_by_hand=over_hand)
            print(_line(rows[-1]), flush=True)
    return rows


def by_hand(source: str, target: str, f: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """`f` (written in `source`) made differentiable in `target` by hand, eagerly, as a user
    would without interop: the target's own custom-gradient mechanism calling the source's
    jitted forward and VJP, the tensors crossing through the frameworks' own DLPack calls
    (zero-copy, unchecked). None for the directions it is not written for: JAX into torch and
    into TensorFlow (the directions whose bridged steps are furthest over their floor)."""
    if source != "jax" or target not in ("torch", "tensorflow"):
        return None
    import jax

    forward = jax.jit(f)
    pullback = jax.jit(lambda x, ct: jax.vjp(f, x)[1](ct)[0])
    if target == "torch":
        import torch

        class ByHand(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                ctx.x = jax.dlpack.from_dlpack(x.detach())
                return torch.from_dlpack(forward(ctx.x))

            @staticmethod
            def backward(ctx: Any, ct: Any) -> Any:
                return torch.from_dlpack(pullback(ctx.x, jax.dlpack.from_dlpack(ct.contiguous())))

        return ByHand.apply
    import tensorflow as tf

    dlpack = tf.experimental.dlpack

    @tf.custom_gradient
    def by_hand_tf(x: Any) -> Any:
        xj = jax.dlpack.from_dlpack(x)

        def grad(ct: Any) -> Any:
            return dlpack.from_dlpack(pullback(xj, jax.dlpack.from_dlpack(ct)).__dlpack__())

        return dlpack.from_dlpack(forward(xj).__dlpack__()), grad

    return by_hand_tf


class _Premade:
    """Tensors made once per (type, shape, dtype, target) and handed out again: what a
    knocked-out conversion returns instead of converting."""

    def __init__(self) -> None:
        self.made: dict[Any, Any] = {}

    def __call__(self, x: Any, to: str) -> Any:
        import numpy as np

        import interop

        x = x.detach() if hasattr(x, "detach") else x
        key = (type(x), tuple(x.shape), str(x.dtype), to)
        found = self.made.get(key)
        if found is None:
            found = self.made[key] = interop.convert(np.array(interop.convert(x, "numpy")), to)
        return found.detach() if hasattr(found, "detach") else found


def attribute(source: str, target: str, mode: str, rounds: int) -> dict[str, float]:
    """Whose is the bridged step's time beyond its floor: the step with the source's `take`
    (the inputs' and cotangents' conversions), its `give` (the outputs' and gradients'), or
    both knocked out (`knockouts`), interleaved with the bridged step and the floor (median µs
    per step, 16 elements)."""
    x, variants = knockouts(source, target)
    scope = {name.replace(" ", "_"): steps(target, fn)[mode] for name, fn in variants.items()}
    for step in scope.values():
        step(x)
    cases = {name: Case(f"{name}(x)", x, scope) for name in scope}
    stats = interleaved(cases, rounds=rounds, batch_ns=2_000_000, max_batch=10_000)
    return {name: stat.median / 1e3 for name, stat in stats.items()}


def knockouts(source: str, target: str) -> tuple[Any, dict[str, Any]]:
    """A target tensor of 16 elements, and the math wrapped ("bridged"), its floor, and the
    wrapped math whose source's `take`, `give` or both ("neither") return tensors made ahead
    instead of converting (`give` still waits for the source's result)."""
    import interop
    from interop.grad import Wrapped

    wrapped: Any = interop.wrap(math_in(source), source, target)
    x = make(target, 16)
    value, grad = steps(target, math_in(target))["eager"](x)
    xs, ct = source_tensors(source, 16)
    floor = floor_of(wrapped, Native(source, math_in(source), xs, ct), value, [grad])
    premade, kind = _Premade(), type(wrapped.source)

    class NoTake(kind):  # type: ignore[misc, valid-type]
        def take(self, x: Any) -> Any:
            return premade(x, self.name)

    class NoGive(kind):  # type: ignore[misc, valid-type]
        def give(self, y: Any, to: str) -> Any:
            if hasattr(y, "block_until_ready"):  # JAX's compute is the source's, not a move's
                y.block_until_ready()
            return premade(y, to)

    class Neither(NoTake, NoGive):
        pass

    variants = {"bridged": wrapped, "floor": floor}
    for name, cls in (("no take", NoTake), ("no give", NoGive), ("neither", Neither)):
        variants[name] = Wrapped(wrapped.fn, cls(), wrapped.target)
    return x, variants


def mlp_step_paths(rounds: int, batch_ns: float) -> dict[str, Any]:
    """One `jax.jit(jax.value_and_grad(loss))` step of a small MLP's loss written in torch and
    wrapped into JAX, traced on the XLA FFI path and on the `jax.pure_callback` path, against
    the same loss written in JAX, and against torch's own eager step of the torch loss (the
    floor of any bridge that runs it); the four interleaved in the same rounds (µs per step)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from interop_jax import xla_ffi

    import interop

    def torch_loss(w1: Any, b1: Any, w2: Any, x: Any, y: Any) -> Any:
        return ((torch.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()

    def jax_loss(w1: Any, b1: Any, w2: Any, x: Any, y: Any) -> Any:
        return ((jnp.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()

    rng = np.random.default_rng(0)
    shapes = [(32, 64), (64,), (64, 1), (64, 32), (64, 1)]  # w1, b1, w2, a batch x, y
    args = tuple(jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in shapes)
    wrapped = interop.wrap(torch_loss, "torch", "jax")
    ffi = jax.jit(jax.value_and_grad(wrapped, (0, 1, 2)))
    callback = jax.jit(jax.value_and_grad(interop.wrap(torch_loss, "torch", "jax"), (0, 1, 2)))
    native = jax.jit(jax.value_and_grad(jax_loss, (0, 1, 2)))
    want = native(*args)
    with xla_ffi.host_callback():  # traced (on its first call) with the host callback
        got_callback = callback(*args)
    got_ffi = ffi(*args)
    on_ffi = xla_ffi.active() and xla_ffi.TARGET in ffi.lower(*args).as_text()
    ok = all(
        np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
        for got in (got_ffi, got_callback)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    )
    tensors = [torch.from_numpy(np.asarray(a)) for a in args]

    def torch_step(*xs: Any) -> Any:  # the same step in torch alone: what the bridge runs
        leaves = [x.detach().requires_grad_(i < 3) for i, x in enumerate(xs)]
        loss = torch_loss(*leaves)
        return loss, torch.autograd.grad(loss, leaves[:3])

    ok = ok and np.allclose(torch_step(*tensors)[1][0], np.asarray(want[1][0]), atol=1e-5)
    scope = {
        "ffi": ffi,
        "callback": callback,
        "native": native,
        "ready": jax.block_until_ready,
        "torch_step": torch_step,
    }
    cases = {
        name: Case(f"ready({name}(*x))", args, scope) for name in ("ffi", "callback", "native")
    }
    cases["torch"] = Case("torch_step(*x)", tensors, scope)
    stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns, max_batch=10_000)
    ffi_ratio, _ = paired(stats["ffi"], stats["native"])
    callback_ratio, _ = paired(stats["callback"], stats["native"])
    _, ffi_added = paired(stats["ffi"], stats["torch"])
    torch_ratio, _ = paired(stats["torch"], stats["native"])
    return {
        "ffi_us": stats["ffi"].median / 1e3,
        "callback_us": stats["callback"].median / 1e3,
        "native_us": stats["native"].median / 1e3,
        "torch_us": stats["torch"].median / 1e3,
        "ffi_over_native": ffi_ratio,
        "callback_over_native": callback_ratio,
        "torch_over_native": torch_ratio,
        "ffi_over_torch_us": ffi_added / 1e3,
        "ffi_path": bool(on_ffi),
        "why": xla_ffi.WHY,
        "gradient_matches": bool(ok),
    }


_DENSE_OPS: dict[str, Any] = {}


def op_dense(through: str) -> Any:
    """`tanh(h @ w + b)` as a hand-written torch custom operator, with a second one for its
    gradient, computed in `through` ("torch", or "jax": inputs and outputs converted with
    `interop.convert`, the math jitted in JAX, its gradient by `jax.vjp`): what an opaque
    operator costs torch itself, eagerly and in a compiled graph, and the least a bridge
    built of torch custom operators could cost (registered once)."""
    if through in _DENSE_OPS:
        return _DENSE_OPS[through]
    import jax
    import jax.numpy as jnp
    import torch

    import interop

    def jax_math(h: Any, w: Any, b: Any) -> Any:
        return jnp.tanh(h @ w + b)

    forward, pull = jax.jit(jax_math), jax.jit(lambda xs, ct: jax.vjp(jax_math, *xs)[1](ct))

    def dense(h: Any, w: Any, b: Any) -> Any:
        if through == "torch":
            return torch.tanh(h @ w + b)
        xs = [interop.convert(t.detach(), "numpy") for t in (h, w, b)]
        return interop.convert(forward(*xs), "torch")

    def dense_grad(h: Any, w: Any, b: Any, ct: Any) -> Any:
        if through == "torch":  # (no autograd inside an operator's kernel: by hand)
            dz = ct * (1 - torch.tanh(h @ w + b) ** 2)
            return [dz @ w.T, h.T @ dz, dz.sum(0)]
        xs = [interop.convert(t.detach(), "numpy") for t in (h, w, b)]
        ct = interop.convert(ct.detach(), "numpy")
        return [interop.convert(g, "torch") for g in pull(xs, ct)]

    name = f"interop_benchmarks::{through}_dense"
    op = torch.library.custom_op(
        name, dense, mutates_args=(), schema="(Tensor h, Tensor w, Tensor b) -> Tensor"
    )
    op.register_fake(lambda h, w, b: h.new_empty(h.shape[0], w.shape[1]))
    grad_op = torch.library.custom_op(
        name + "_grad",
        dense_grad,
        mutates_args=(),
        schema="(Tensor h, Tensor w, Tensor b, Tensor ct) -> Tensor[]",
    )
    grad_op.register_fake(lambda h, w, b, ct: [torch.empty_like(t) for t in (h, w, b)])

    def setup(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(*inputs)

    op.register_autograd(
        lambda ctx, ct: tuple(grad_op(*ctx.saved_tensors, ct)), setup_context=setup
    )
    _DENSE_OPS[through] = op
    return op


def model_case(rounds: int, batch_ns: float, width: int = 64) -> dict[str, Any]:
    """A new user's model: a torch MLP (width/2 → width → width → 1; 32 → 64 → 64 → 1 by
    default) whose middle layer is written in JAX and wrapped, trained with SGD on a batch of
    `width`. One step (zero_grad, forward, backward, optimizer step) eagerly and under
    `torch.compile(fullgraph=True)`, each against its floor (the JAX layer's own jitted
    forward and backward on pre-made arrays in its place), the same model all in torch, all in
    torch with the JAX layer's own work run beside it (unbridged: what torch.compile costs a
    torch step that also runs this JAX work), and with the layer a hand-written torch custom
    operator computing in torch or bridging to JAX (`op_dense`), the twelve in the same
    interleaved rounds (µs per step)."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    import interop

    def jax_dense(h: Any, w: Any, b: Any) -> Any:
        return jnp.tanh(h @ w + b)

    def torch_dense(h: Any, w: Any, b: Any) -> Any:
        return torch.tanh(h @ w + b)

    class MLP(torch.nn.Module):
        def __init__(self, dense: Any) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.inp, self.out = torch.nn.Linear(width // 2, width), torch.nn.Linear(width, 1)
            self.w = torch.nn.Parameter(torch.randn(width, width) * 0.1)
            self.b = torch.nn.Parameter(torch.zeros(width))
            self.dense = dense

        def forward(self, x: Any, y: Any) -> Any:
            h = self.dense(torch.relu(self.inp(x)), self.w, self.b)
            return ((self.out(h) - y) ** 2).mean()

    torch.manual_seed(1)
    batch = (torch.randn(width, width // 2), torch.randn(width, 1))
    wrapped = interop.wrap(jax_dense, "jax", "torch")
    # the floor's layer: the JAX layer's work on pre-made arrays, its output and gradients
    probe = MLP(torch_dense)
    h = torch.relu(probe.inp(batch[0])).detach().requires_grad_(True)
    w, b = probe.w.detach().requires_grad_(True), probe.b.detach().requires_grad_(True)
    out = torch_dense(h, w, b)
    ct = torch.ones_like(out)
    grads = list(torch.autograd.grad(out, (h, w, b), ct))
    arrays = [jnp.asarray(t.detach().numpy()) for t in (h, w, b)]
    native_layer = Native("jax", jax_dense, arrays, jnp.asarray(ct.numpy()))
    floor_layer = floor_of(wrapped, native_layer, out, grads)

    def step_of(model: Any, compiled: bool, beside: bool) -> Callable[[Any], Any]:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        forward = torch.compile(model, fullgraph=True) if compiled else model

        def step(batch: Any) -> Any:
            opt.zero_grad(set_to_none=True)
            loss = forward(*batch)
            loss.backward()
            opt.step()
            return loss

        def run_beside(batch: Any) -> Any:
            opt.zero_grad(set_to_none=True)
            native_layer.forward()
            loss = forward(*batch)
            native_layer.backward(None)
            loss.backward()
            opt.step()
            return loss

        return run_beside if beside else step

    layers = {
        "bridged": wrapped,
        "floor": floor_layer,
        "torch": torch_dense,
        "beside": torch_dense,  # (run with the JAX layer's own work beside the model)
        "op": op_dense("torch"),
        "jaxop": op_dense("jax"),
    }
    scope = {
        f"{name}_{mode}": step_of(MLP(layer), mode == "compiled", name == "beside")
        for name, layer in layers.items()
        for mode in ("eager", "compiled")
    }
    # gradients of the first step, bridged (eager and compiled) against the model in torch
    firsts = {}
    checked = ("bridged_eager", "bridged_compiled", "op_compiled", "jaxop_compiled")
    for name in (*checked, "torch_eager"):
        model = MLP(layers[name.split("_")[0]])
        forward = torch.compile(model, fullgraph=True) if name.endswith("compiled") else model
        forward(*batch).backward()
        firsts[name] = model.w.grad.detach().numpy().copy()  # type: ignore[union-attr]
    ok = all(np.allclose(firsts[k], firsts["torch_eager"], rtol=1e-4, atol=1e-6) for k in checked)
    cases = {name: Case(f"{name}(x)", batch, scope) for name in scope}
    stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns, max_batch=10_000)
    row: dict[str, Any] = {f"{k}_us": v.median / 1e3 for k, v in stats.items()}
    for mode in ("eager", "compiled"):
        row[f"{mode}_over_floor"] = paired(stats[f"bridged_{mode}"], stats[f"floor_{mode}"])[0]
        row[f"{mode}_over_torch"] = paired(stats[f"bridged_{mode}"], stats[f"torch_{mode}"])[0]
    for name in layers:
        ratio, diff = paired(stats[f"{name}_compiled"], stats[f"{name}_eager"])
        row[f"{name}_compiled_over_eager"] = ratio
        row[f"{name}_compiled_minus_eager_us"] = diff / 1e3
    row["gradient_matches"], row["width"] = bool(ok), width
    return row


def _model_lines(row: dict[str, Any]) -> str:
    width = row["width"]
    lines = [
        f"| MLP {width // 2} → {width} → {width} → 1 with a JAX layer, one SGD step (batch "
        f"{width}) | eager µs | compiled µs | compiled / eager | compiled − eager µs |",
        "|---|---|---|---|---|",
    ]
    for name, what in (
        ("bridged", "bridged"),
        ("floor", "floor"),
        ("torch", "all torch"),
        ("beside", "all torch, the JAX layer's own work run beside it"),
        ("op", "layer: a torch custom op"),
        ("jaxop", "layer: a hand-written op calling JAX"),
    ):
        lines.append(
            f"| {what} | {row[f'{name}_eager_us']:,.1f} | {row[f'{name}_compiled_us']:,.1f} | "
            f"**{row[f'{name}_compiled_over_eager']:.2f}** | "
            f"{row[f'{name}_compiled_minus_eager_us']:+,.1f} |"
        )
    lines.append(
        f"bridged / floor: eager {row['eager_over_floor']:.2f}, compiled "
        f"{row['compiled_over_floor']:.2f}; bridged / all torch: eager "
        f"{row['eager_over_torch']:.2f}, compiled {row['compiled_over_torch']:.2f}; "
        f"gradients match: {row['gradient_matches']}"
    )
    return "\n".join(lines)


def _line(row: dict[str, Any]) -> str:
    return (
        f"| {row['source']} → {row['target']} | {row['mode']} | {row['n']:,} | "
        f"{row['native_us']:,.1f} | {row['floor_us']:,.1f} | {row['bridged_us']:,.1f} | "
        f"**{row['floor_ratio']:.2f}** | {row['beyond_floor_us']:+,.1f} | {row['ratio']:.2f} | "
        f"{'yes' if row['gradient_matches'] else 'NO'} |"
    )


def _by_hand_lines(rows: list[dict[str, Any]]) -> str:
    """Bridged steps against the same step written by hand (`by_hand`), where there is one."""
    lines = [
        "| direction, eager | by hand µs | bridged µs | bridged / by hand |",
        "|---|---|---|---|",
    ]
    for row in rows:
        if "by_hand_us" in row:
            lines.append(
                f"| {row['source']} → {row['target']} ({row['n']:,}) | {row['by_hand_us']:,.1f} "
                f"| {row['bridged_us']:,.1f} | **{row['over_by_hand']:.2f}** |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


HEADER = (
    "| direction | mode | elements | native µs | floor µs | bridged µs | bridged / floor "
    "| beyond floor µs | bridged / native | gradient = native |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


@contextlib.contextmanager
def clock(kind: str) -> Any:
    """`timing`'s clock meanwhile: "wall" (`perf_counter_ns`, its own), or "cpu": this
    process's CPU time, all its threads (`process_time_ns`), which the other processes of a
    shared machine do not move (they do move wall time, by 2-5× under a load of 5-10 on 2
    cores); the frameworks' spinning pools count in it, on both sides of a pair."""
    if kind == "wall":
        yield
        return
    before = timing.time
    timing.time = types.SimpleNamespace(perf_counter_ns=time.process_time_ns)  # type: ignore[assignment]
    try:
        yield
    finally:
        timing.time = before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--sizes", default=None, help="default 16,100000 (16 with --quick)")
    parser.add_argument("--directions", default="", help="e.g. torch-jax,tensorflow-torch")
    parser.add_argument("--json", default=None, help="also write the rows and machine here")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch's intra-op threads (default 1: on a shared 2-core machine torch's OpenMP "
        "pool took 40-60 ms for what one thread does in 1 ms, on both sides alike)",
    )
    parser.add_argument(
        "--attribute",
        default="",
        help="e.g. jax-torch:eager: that step with its conversions knocked out, against its "
        "floor (whose is the time beyond it)",
    )
    parser.add_argument(
        "--jit-paths",
        action="store_true",
        help="only the jax.jit step of a torch MLP loss: XLA FFI vs host callback vs native JAX",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time per step as wall time, or as this process's CPU time (a shared machine)",
    )
    parser.add_argument(
        "--model",
        choices=("yes", "no", "only"),
        default="yes",
        help="the torch MLP with a wrapped JAX layer, eager vs torch.compile (after the table)",
    )
    parser.add_argument(
        "--model-width", type=int, default=64, help="its hidden width and batch (default 64)"
    )
    parser.add_argument(
        "--jax-sync-dispatch",
        action="store_true",
        help="JAX runs CPU computations inline, not dispatched to its worker thread "
        "(jax_cpu_enable_async_dispatch=False, set before JAX's first computation)",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (15 if args.quick else 41)
    sizes = tuple(int(s) for s in (args.sizes or ("16" if args.quick else "16,100000")).split(","))
    installed = [f for f in FRAMEWORKS if importlib.util.find_spec(f) is not None]
    pairs = [(s, t) for s in installed for t in installed if s != t]
    if args.directions:
        wanted = {
            tuple(d.replace("tf", "tensorflow").split("-")) for d in args.directions.split(",")
        }
        pairs = [p for p in pairs if p in wanted]
    if args.jax_sync_dispatch and "jax" in installed:
        import jax

        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if "torch" in installed and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    if args.attribute:
        direction, _, mode = args.attribute.partition(":")
        source, target = direction.replace("tf", "tensorflow").split("-")
        with clock(args.clock):
            got = attribute(source, target, mode or "eager", rounds)
        print(
            f"{source} → {target} {mode or 'eager'}, µs per step: "
            + ", ".join(f"{name.replace('_', ' ')} {us:,.1f}" for name, us in got.items())
        )
        return 0
    if args.jit_paths:
        row = mlp_step_paths(rounds, batch_ns=2_000_000)
        print(
            f"jax.jit(value_and_grad) of a torch MLP loss, µs per step: XLA FFI "
            f"{row['ffi_us']:,.1f} ({row['ffi_over_native']:.1f}× native), host callback "
            f"{row['callback_us']:,.1f} ({row['callback_over_native']:.1f}×), native JAX "
            f"{row['native_us']:,.1f}; torch's own eager step {row['torch_us']:,.1f} "
            f"({row['torch_over_native']:.1f}× native JAX; the FFI path adds "
            f"{row['ffi_over_torch_us']:+,.1f}); gradients match: {row['gradient_matches']}; "
            f"FFI path: {row['ffi_path']} ({row['why']})"
        )
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"machine": machine(), "jit_paths": row}, out, indent=1)
        return 0 if row["gradient_matches"] else 1
    for missing in sorted(set(FRAMEWORKS) - set(installed)):
        print(f"skipped: {missing} is not installed", file=sys.stderr)
    with clock(args.clock):
        return _run(args, pairs, installed, sizes, rounds)


def _run(
    args: Any,
    pairs: list[tuple[str, str]],
    installed: list[str],
    sizes: tuple[int, ...],
    rounds: int,
) -> int:
    rows: list[dict[str, Any]] = []
    if args.model != "only":
        print(HEADER)
        for source, target in pairs:
            rows += measure(source, target, sizes, rounds, batch_ns=2_000_000)
        if _by_hand_lines(rows):
            print(_by_hand_lines(rows), flush=True)
    model = None
    if args.model != "no" and {"torch", "jax"} <= set(installed):
        model = model_case(rounds, batch_ns=4_000_000, width=args.model_width)
        print(_model_lines(model), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine(), "rows": rows, "model": model}, out, indent=1)
    ok = all(r["gradient_matches"] for r in rows) and (model is None or model["gradient_matches"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
