"""What one forward+backward through `interop.wrap` costs, against the target framework's own
autodiff doing the same math, for every direction among torch, JAX and TensorFlow.

    python -m benchmarks.grad              # sizes 16 and 1e5, every installed direction
    python -m benchmarks.grad --quick      # fewer rounds
    python -m benchmarks.grad --json out.json --directions torch-jax,jax-torch
    python -m benchmarks.grad --jit-paths  # a torch MLP under jax.jit: FFI, callback, native, torch

The math is `sum(sin(x) * x)` for a float32 vector `x`: written natively in the target, and in
the source then wrapped. One step is the value and the gradient of `x`:
`torch.autograd.grad` (eager, and of `torch.compile(f, fullgraph=True)`: the bridge is then a
custom operator in the compiled graph), `jax.grad` (eager and under `jax.jit`),
`tf.GradientTape` (eager and inside `tf.function`); JAX results are waited on. Both steps run
in the same interleaved rounds (see `timing.py`); the report gives the medians of the
per-round differences and ratios. Each bridged gradient is checked against the native one
before it is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from typing import Any

from .env import machine
from .timing import Case, interleaved, paired

FRAMEWORKS = ("torch", "jax", "tensorflow")
SIZES = (16, 100_000)
#: one forward+backward, CPU, measured by the prototype the issue reports (ms), 16 elements
PROTOTYPE_MS = {
    ("torch", "jax", "jit"): 0.88,
    ("jax", "torch", "eager"): 0.63,
    ("tensorflow", "torch", "eager"): 1.28,
    ("tensorflow", "jax", "jit"): 1.85,
}


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

        return torch.from_numpy(values).requires_grad_(True)
    if target == "jax":
        import jax.numpy as jnp

        return jnp.asarray(values)
    import tensorflow as tf

    return tf.constant(values)


def as_numpy(value: Any) -> Any:
    import numpy as np

    return np.asarray(value.detach() if hasattr(value, "detach") else value)


def measure(
    source: str, target: str, sizes: tuple[int, ...], rounds: int, batch_ns: float
) -> list[dict[str, Any]]:
    import numpy as np

    import interop

    native = steps(target, math_in(target))
    bridged = steps(target, interop.wrap(math_in(source), source, target))
    rows = []
    for mode in native:
        for n in sizes:
            x = make(target, n)
            want, got = native[mode](x), bridged[mode](x)
            ok = np.allclose(as_numpy(want[1]), as_numpy(got[1]), rtol=1e-4, atol=1e-4)
            scope = {"native": native[mode], "bridged": bridged[mode]}
            cases = {
                "native": Case("native(x)", x, scope),
                "bridged": Case("bridged(x)", x, scope),
            }
            stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns, max_batch=10_000)
            ratio, diff = paired(stats["bridged"], stats["native"])
            rows.append(
                {
                    "source": source,
                    "target": target,
                    "mode": mode,
                    "n": n,
                    "native_us": stats["native"].median / 1e3,
                    "bridged_us": stats["bridged"].median / 1e3,
                    "added_us": diff / 1e3,
                    "ratio": ratio,
                    "gradient_matches": bool(ok),
                    "prototype_ms": PROTOTYPE_MS.get((source, target, mode)) if n == 16 else None,
                }
            )
            print(_line(rows[-1]), flush=True)
    return rows


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


def _line(row: dict[str, Any]) -> str:
    proto = f"{row['prototype_ms']:.2f}" if row["prototype_ms"] else ""
    return (
        f"| {row['source']} → {row['target']} | {row['mode']} | {row['n']:,} | "
        f"{row['native_us']:,.1f} | {row['bridged_us']:,.1f} | {row['added_us']:+,.1f} | "
        f"{row['ratio']:.2f} | {'yes' if row['gradient_matches'] else 'NO'} | {proto} |"
    )


HEADER = (
    "| direction | mode | elements | native µs | bridged µs | added µs | ratio "
    "| gradient = native | prototype ms |\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
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
        "--jit-paths",
        action="store_true",
        help="only the jax.jit step of a torch MLP loss: XLA FFI vs host callback vs native JAX",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (15 if args.quick else 41)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    installed = [f for f in FRAMEWORKS if importlib.util.find_spec(f) is not None]
    pairs = [(s, t) for s in installed for t in installed if s != t]
    if args.directions:
        wanted = {
            tuple(d.replace("tf", "tensorflow").split("-")) for d in args.directions.split(",")
        }
        pairs = [p for p in pairs if p in wanted]
    if "torch" in installed and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
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
    print(HEADER)
    rows = []
    for source, target in pairs:
        rows += measure(source, target, sizes, rounds, batch_ns=2_000_000)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine(), "rows": rows}, out, indent=1)
    return 0 if all(r["gradient_matches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
