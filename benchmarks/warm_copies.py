"""Small conversions the plan must copy, called again and again: `interop.convert` against the
calls a user of the two frameworks writes to make the same copy.

`python -m benchmarks.warm_copies [--quick] [--json PATH]` (INTEROP_PURE_PYTHON=1 times the
pure-Python fast path)

Cases (64 float32 each, where both frameworks are installed): a read-only NumPy array into
torch, Paddle and MXNet (whose tensors are always writable), a reversed NumPy view into torch
and JAX (which import no negative strides), a NumPy array 4 bytes past a 64-byte boundary into
TensorFlow (whose kernels need aligned buffers), a transposed torch tensor into TensorFlow
(which imports row-major tensors only: NumPy copies it), and a NumPy scalar (`np.float32`)
into torch and JAX (a fresh 0-d array, as `torch.as_tensor(x)` makes). Each statement is run
once and checked to give fresh memory with the source's values, which the target's own kernels
then read; `convert` is called a few times first, so it has learned what it remembers. Timed
in the same interleaved rounds (see `timing.py`); reported: each median, and `convert`'s
difference to the fastest direct call and ratio to it, from per-round pairs, and whether
`convert` took a remembered route (`explain` says so).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import env  # first: sets the TF/JAX environment before any framework
from benchmarks.timing import Case, interleaved, paired

N = 64


def read_only(np: Any) -> Any:
    a = np.arange(N, dtype=np.float32).reshape(-1, 8)
    a.flags.writeable = False
    return a


def reversed_view(np: Any) -> Any:
    return np.arange(N, dtype=np.float32)[::-1]


def unaligned(np: Any) -> Any:
    raw = np.zeros(4 * N + 128, np.uint8)
    start = -raw.__array_interface__["data"][0] % 64 + 4
    a = raw[start : start + 4 * N].view(np.float32)
    a[...] = np.arange(N)
    return a


def numpy_scalar(np: Any) -> Any:
    return np.float32(3.0)


def transposed_torch(np: Any) -> Any:
    import torch

    return torch.arange(N, dtype=torch.float32).reshape(8, -1).T


#: (title, target, what makes the source, {label: direct statement on `x`})
CASES: list[tuple[str, str, Callable[[Any], Any], dict[str, str]]] = [
    (
        "read-only numpy → torch",
        "torch",
        read_only,
        {
            "torch.from_numpy(x.copy())": "torch.from_numpy(x.copy())",
            "torch.tensor": "torch.tensor(x)",
        },
    ),
    ("read-only numpy → paddle", "paddle", read_only, {"paddle.to_tensor": "paddle.to_tensor(x)"}),
    ("read-only numpy → mxnet", "mxnet", read_only, {"mx.nd.array": "mx.nd.array(x)"}),
    (
        "reversed numpy → torch",
        "torch",
        reversed_view,
        {
            "torch.from_numpy(x.copy())": "torch.from_numpy(x.copy())",
            "torch.tensor": "torch.tensor(x)",
        },
    ),
    (
        "reversed numpy → jax",
        "jax",
        reversed_view,
        {"jnp.asarray": "jnp.asarray(x)", "jax.device_put": "jax.device_put(x)"},
    ),
    ("unaligned numpy → tensorflow", "tensorflow", unaligned, {"tf.constant": "tf.constant(x)"}),
    (
        "numpy scalar → torch",
        "torch",
        numpy_scalar,
        {"torch.tensor": "torch.tensor(x)", "torch.as_tensor": "torch.as_tensor(x)"},
    ),
    ("numpy scalar → jax", "jax", numpy_scalar, {"jnp.asarray": "jnp.asarray(x)"}),
    (
        "transposed torch → tensorflow",
        "tensorflow",
        transposed_torch,
        {"tf.constant(x.numpy())": "tf.constant(x.numpy())"},
    ),
]

MODULES = {
    "torch": ("torch", "torch"),
    "paddle": ("paddle", "paddle"),
    "mxnet": ("mx", "mxnet"),
    "jax": ("jnp", "jax.numpy"),
    "tensorflow": ("tf", "tensorflow"),
}


def _fresh_and_equal(adapter: Any, source: Any, result: Any) -> str | None:
    """Why `result` is not a fresh copy of `source`'s values (None: it is), read back and
    used by the target's own kernels."""
    from interop.api import HUB

    own = HUB.registry.detect(source) or HUB.registry.get("numpy")  # (a NumPy scalar)
    if adapter.data_address(result) == own.data_address(source):
        return "it shares the source's memory"
    adapter.exercise(result)
    if adapter.to_bytes(result) != own.to_bytes(source):
        return "its values differ"
    return None


def measure(
    title: str, target: str, make: Callable[[Any], Any], direct: dict[str, str], rounds: int,
    batch_ns: float,
) -> dict[str, Any]:  # fmt: skip
    import numpy as np

    import interop
    from interop.api import HUB

    adapter = HUB.registry.get(target)
    alias, module = MODULES[target]
    names: dict[str, Any] = {
        "np": np,
        alias: env.import_framework(module),
        "convert": interop.convert,
        "to": target,
    }
    if target == "jax":
        names["jax"] = env.import_framework("jax")
    x = make(np)
    statements = {"convert": "convert(x, to)", **direct}
    left_out = {}
    for label, stmt in list(statements.items()):
        try:
            for _ in range(3):  # (convert learns what it remembers)
                result = eval(stmt, dict(names, x=x))
            why = _fresh_and_equal(adapter, x, result)
        except Exception as exc:
            why = f"{type(exc).__name__}: {str(exc)[:100]}"
        if why and label == "convert":
            raise RuntimeError(f"{title}: convert: {why}")
        if why:
            left_out[label] = why
            del statements[label]
    if len(statements) < 2:
        raise RuntimeError(f"{title}: no direct call makes the copy: {left_out}")
    route = str(interop.explain(x, target).steps[0])
    stats = interleaved(
        {label: Case(stmt, x, names) for label, stmt in statements.items()},
        rounds=rounds,
        batch_ns=batch_ns,
    )
    others = {k: v for k, v in stats.items() if k != "convert"}
    fastest = min(others, key=lambda k: others[k].median)
    ratio, diff = paired(stats["convert"], others[fastest])
    return {
        "case": title,
        "convert_us": stats["convert"].median / 1e3,
        "direct_us": {k: v.median / 1e3 for k, v in others.items()},
        "fastest_direct": fastest,
        "convert_minus_direct_us": diff / 1e3,
        "ratio": ratio,
        "remembered": "takes the route remembered" in route,
        "fast_path": HUB.routes.fast.label,
        "rounds": stats["convert"].rounds,
        "direct_left_out": left_out,
    }


def markdown(rows: list[dict[str, Any]], skipped: dict[str, str], record: dict[str, Any]) -> str:
    path = rows[0]["fast_path"] if rows else "?"
    lines = [
        "# interop-hub: small copies, called again and again",
        "",
        f"Command: `python -m benchmarks.warm_copies` — {record['date']}; {record['cpu']}, "
        f"{record['cpus']} CPUs; Python {record['python']}, git {record['git']}; fast path: "
        f"{path}.",
        "",
        f"{N} float32 per call; medians, and per-round paired difference and ratio to the "
        "fastest direct call.",
        "",
        "| case | convert µs | fastest direct | direct µs | convert − direct µs | ratio "
        "| remembered route |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fastest = r["fastest_direct"]
        lines.append(
            f"| {r['case']} | {r['convert_us']:.2f} | `{fastest}` "
            f"| {r['direct_us'][fastest]:.2f} | {r['convert_minus_direct_us']:+.2f} "
            f"| {r['ratio']:.2f}x | {'yes' if r['remembered'] else 'no'} |"
        )
    left = [(r["case"], k, v) for r in rows for k, v in r["direct_left_out"].items()]
    if left:
        lines += ["", "Direct calls left out (they fail or share):", ""]
        lines += [f"- {case}: `{label}`: {why}" for case, label, why in left]
    if skipped:
        lines += ["", "Not measured here:", ""]
        lines += [f"- {case}: {why}" for case, why in skipped.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.warm_copies", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a rough figure)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    rounds, batch_ns = (11, 2e6) if args.quick else (41, 5e6)
    from interop.api import HUB

    rows, skipped = [], {}
    for title, target, make, direct in CASES:
        adapter = HUB.registry.get(target)
        why = adapter.unavailable() if adapter.installed() else f"{target} is not installed"
        if why:
            skipped[title] = why
            continue
        rows.append(measure(title, target, make, direct, rounds, batch_ns))
    record = env.machine()
    print(markdown(rows, skipped, record))
    if args.json:
        args.json.write_text(json.dumps({"machine": record, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
