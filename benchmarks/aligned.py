"""A 16 MB NumPy batch into JAX and TensorFlow, made by NumPy's default allocator and inside
`interop.aligned_numpy()`: the first is 16-byte aligned and copied, the second shared.

`python -m benchmarks.aligned [--quick] [--json PATH]` (the compiled accelerator is needed:
the pure-Python twin has no aligned allocator)

Each conversion is checked first: the aligned batch's result has the batch's data address
(`unsafe_buffer_pointer()` for JAX, the adapter's `data_address` for TensorFlow), the
default one's does not. Making the batch (`np.ones`) is timed both ways too: the aligned
allocator costs what NumPy's does. Timed in the same interleaved rounds (see `timing.py`);
reported: each median, and the paired difference and ratio of each pair.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import env  # first: sets the TF/JAX environment before any framework
from benchmarks.timing import Case, interleaved, paired

NBYTES = 16 << 20
TARGETS = ("jax", "tensorflow")


def batches(np: Any, interop: Any) -> tuple[Any, Any]:
    """(a batch 16 bytes past a 64-byte boundary, where NumPy's default allocator places most
    arrays, and one made inside aligned_numpy())."""
    n = NBYTES // 4
    raw = np.ones(n + 16, np.float32)
    start = (16 - raw.ctypes.data % 64) % 64 // 4
    plain = raw[start : start + n]
    with interop.aligned_numpy():
        aligned = np.ones(n, np.float32)
    return plain, aligned


def check(target: str, plain: Any, aligned: Any) -> None:
    """Raise unless `aligned` is shared with `target` and `plain` copied, by data address."""
    import interop
    from interop.api import HUB

    adapter = HUB.registry.get(target)
    for x, shared in ((plain, False), (aligned, True)):
        y = interop.convert(x, target)
        adapter.exercise(y)
        if (adapter.data_address(y) == x.ctypes.data) != shared:
            raise RuntimeError(f"{target}: the {'aligned' if shared else 'plain'} batch was not "
                               f"{'shared' if shared else 'copied'}")  # fmt: skip


def measure(rounds: int, batch_ns: float) -> dict[str, Any]:
    import numpy as np

    import interop
    from interop.api import HUB

    plain, aligned = batches(np, interop)
    names = {"np": np, "convert": interop.convert, "aligned_numpy": interop.aligned_numpy}
    cases = {
        "np.ones, default allocator": Case("np.ones(x, np.float32)", NBYTES // 4, names),
        "np.ones, aligned_numpy()": Case(
            "with aligned_numpy(): np.ones(x, np.float32)", NBYTES // 4, names
        ),
    }
    skipped = {}
    for target in TARGETS:
        adapter = HUB.registry.get(target)
        why = adapter.unavailable() if adapter.installed() else f"{target} is not installed"
        if why:
            skipped[target] = why
            continue
        check(target, plain, aligned)
        cases[f"→ {target}, default allocator"] = Case(f"convert(x, {target!r})", plain, names)
        cases[f"→ {target}, aligned_numpy()"] = Case(f"convert(x, {target!r})", aligned, names)
    stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns)
    labels = list(stats)
    pairs = []
    for plain_label, aligned_label in zip(labels[::2], labels[1::2], strict=True):
        ratio, diff = paired(stats[plain_label], stats[aligned_label])
        pairs.append(
            {
                "what": plain_label.split(",")[0],
                "default_us": stats[plain_label].median / 1e3,
                "aligned_us": stats[aligned_label].median / 1e3,
                "default_minus_aligned_us": diff / 1e3,
                "ratio": ratio,
                "rounds": stats[plain_label].rounds,
            }
        )
    return {"pairs": pairs, "skipped": skipped, "fast_path": HUB.routes.fast.label}


def markdown(result: dict[str, Any], record: dict[str, Any]) -> str:
    lines = [
        "# interop-hub: a 16 MB NumPy batch, default and aligned allocator",
        "",
        f"Command: `python -m benchmarks.aligned` — {record['date']}; {record['cpu']}, "
        f"{record['cpus']} CPUs; Python {record['python']}, git {record['git']}; fast path: "
        f"{result['fast_path']}.",
        "",
        "| what | default allocator µs | aligned_numpy() µs | paired difference µs | ratio |",
        "|---|---|---|---|---|",
    ]
    for p in result["pairs"]:
        lines.append(
            f"| {p['what']} | {p['default_us']:.1f} | {p['aligned_us']:.1f} "
            f"| {p['default_minus_aligned_us']:+.1f} | {p['ratio']:.1f}x |"
        )
    if result["skipped"]:
        lines += ["", "Not measured here:", ""]
        lines += [f"- {target}: {why}" for target, why in result["skipped"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.aligned", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a rough figure)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    rounds, batch_ns = (7, 2e7) if args.quick else (21, 5e7)
    result = measure(rounds, batch_ns)
    record = env.machine()
    print(markdown(result, record))
    if args.json:
        args.json.write_text(json.dumps({"machine": record, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
