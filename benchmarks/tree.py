"""Whole structures: `interop.convert_tree` against hand-written dict comprehensions.

`python -m benchmarks.tree [--quick] [--json PATH]`

For a 300-leaf float32 state dict (torch -> jax, torch -> numpy, jax -> torch, and torch ->
torch, where `convert` returns each tensor itself, to show the tree's own cost with the least
noise) and a tf.data batch dict (tensorflow -> torch), these statements are timed in the same
interleaved rounds (see `timing.py`), each converting the whole structure once:

- `convert_tree(x, to)`;
- `{k: convert(v, to) for k, v in x.items()}`: the single-tensor path in a hand-written loop;
- `{k: <direct call> for k, v in x.items()}` for every direct DLPack route of the pair (from
  `frameworks.py`); the fastest one is the reference.

Every route is run once and checked to share each leaf's memory before it is timed. Reported
per leaf, from per-round pairs: what the tree adds over the hand-written loop of `convert`
(target: at most 0.5 us), what `convert` adds over the direct call, and the total.
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
from benchmarks import frameworks as fws
from benchmarks.timing import Case, Stats, interleaved, paired

LEAVES = 300
TARGET_NS = 500.0  # per leaf, tree over the loop of single-tensor calls


def state_dict(torch: Any) -> dict[str, Any]:
    """300 float32 tensors named like a 150-layer model's weights and biases."""
    torch.manual_seed(0)
    leaves = {}
    for i in range(LEAVES // 2):
        leaves[f"layers.{i}.weight"] = torch.randn(64, 64)
        leaves[f"layers.{i}.bias"] = torch.randn(64)
    return leaves


def batch(tf: Any) -> dict[str, Any]:
    """One batch of a tf.data pipeline: images, labels, sample weights and a mask."""
    import numpy as np

    rows = 256
    data = tf.data.Dataset.from_tensor_slices(
        {
            "image": np.random.default_rng(0).random((rows, 28, 28), dtype=np.float32),
            "label": np.arange(rows, dtype=np.int64) % 10,
            "weight": np.ones(rows, dtype=np.float32),
            "mask": np.arange(rows) % 3 == 0,
        }
    )
    return next(iter(data.batch(32)))


def _shares(src: Any, dst: Any, tree: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Why `result` does not share every leaf of `tree` (None: it does)."""
    if list(result) != list(tree):
        return "keys differ"
    for key, leaf in tree.items():
        if dst.adapter.data_address(result[key]) != src.adapter.data_address(leaf):
            return f"{key} was copied"
    return None


class Side:
    """A framework as this benchmark drives it: its adapter and its route table entry."""

    def __init__(self, name: str) -> None:
        from interop.registry import REGISTRY

        self.adapter = REGISTRY.get(name)
        self.module = self.adapter.modules[0]
        spec = fws.spec_for(self.module)
        if spec is None:
            raise RuntimeError(f"no route table entry for {self.module}")
        self.spec = spec


def measure(
    title: str, src: Side, dst: Side, tree: dict[str, Any], rounds: int, batch_ns: float
) -> dict[str, Any]:
    import interop

    names = {**src.spec.names, **dst.spec.names}
    names.update(convert_tree=interop.convert_tree, convert=interop.convert, to=dst.adapter.name)
    statements = {
        "convert_tree": "convert_tree(x, to)",
        "loop of convert": "{k: convert(v, to) for k, v in x.items()}",
    }
    skipped = {}
    for route in fws.routes(src.spec, dst.spec, x="v"):
        if not route.dlpack:
            continue
        stmt = f"{{k: {route.code} for k, v in x.items()}}"
        try:
            why = _shares(src, dst, tree, eval(stmt, dict(names, x=tree)))
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
        if why:
            skipped[route.label] = why
        else:
            statements[route.label] = stmt
    for label in ("convert_tree", "loop of convert"):
        why = _shares(src, dst, tree, eval(statements[label], dict(names, x=tree)))
        if why:
            raise RuntimeError(f"{title}: {label} does not share memory: {why}")
    cases = {label: Case(stmt, tree, names) for label, stmt in statements.items()}
    stats = interleaved(cases, rounds=rounds, batch_ns=batch_ns)
    direct = {k: v for k, v in stats.items() if k not in ("convert_tree", "loop of convert")}
    if not direct:
        raise RuntimeError(f"{title}: no direct route shares memory: {skipped}")
    fastest = min(direct, key=lambda k: direct[k].median)  # a label; its statement is timed
    n = len(tree)

    def per_leaf(a: Stats, b: Stats) -> float:
        return paired(a, b)[1] / n

    tree_s, loop_s, direct_s = stats["convert_tree"], stats["loop of convert"], direct[fastest]
    return {
        "case": title,
        "leaves": n,
        "convert_tree_us": tree_s.median / 1e3,
        "loop_us": loop_s.median / 1e3,
        "direct_us": direct_s.median / 1e3,
        "direct_route": statements[fastest],
        "tree_over_loop_ns_per_leaf": per_leaf(tree_s, loop_s),
        "loop_over_direct_ns_per_leaf": per_leaf(loop_s, direct_s),
        "tree_over_direct_ns_per_leaf": per_leaf(tree_s, direct_s),
        "ratio_tree_to_direct": paired(tree_s, direct_s)[0],
        "routes_skipped": skipped,
        "rounds": tree_s.rounds,
    }


def markdown(rows: list[dict[str, Any]], record: dict[str, Any]) -> str:
    lines = [
        "# interop-hub: whole structures",
        "",
        f"Command: `python -m benchmarks.tree` — {record['date']}; {record['cpu']}, "
        f"{record['cpus']} CPUs; Python {record['python']}, git {record['git']}.",
        "",
        "Per leaf, medians of per-round differences (library and direct run side by side). "
        f"Target: convert_tree adds at most {TARGET_NS / 1e3:.1f} us per leaf over the loop of "
        "single-tensor `convert` calls.",
        "",
        "| case | leaves | convert_tree µs | loop of convert µs | direct µs | tree − loop "
        "per leaf µs | target | convert − direct per leaf µs | tree − direct per leaf µs "
        "| ratio | fastest direct |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r["tree_over_loop_ns_per_leaf"] <= TARGET_NS else "**no**"
        lines.append(
            f"| {r['case']} | {r['leaves']} | {r['convert_tree_us']:.0f} | {r['loop_us']:.0f} "
            f"| {r['direct_us']:.0f} | {r['tree_over_loop_ns_per_leaf'] / 1e3:.2f} | {met} "
            f"| {r['loop_over_direct_ns_per_leaf'] / 1e3:.2f} "
            f"| {r['tree_over_direct_ns_per_leaf'] / 1e3:.2f} | {r['ratio_tree_to_direct']:.1f}x "
            f"| `{r['direct_route']}` |"
        )
    skipped = [(r["case"], k, v) for r in rows for k, v in r["routes_skipped"].items()]
    if skipped:
        lines += ["", "Direct routes left out (they copy or fail):", ""]
        lines += [f"- {case}: `{route}`: {why}" for case, route, why in skipped]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tree", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a rough figure)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    rounds, batch_ns = (7, 5e6) if args.quick else (31, 2e7)

    torch_ = env.import_framework("torch")
    jnp = env.import_framework("jax.numpy")
    tf = env.import_framework("tensorflow")
    torch, jax, numpy, tensorflow = (Side(n) for n in ("torch", "jax", "numpy", "tensorflow"))
    weights = state_dict(torch_)
    in_jax = {k: jnp.asarray(v.numpy()).block_until_ready() for k, v in weights.items()}
    cases = [
        # Same framework: convert returns each tensor itself (~1 us), so this row shows the
        # tree's own cost per leaf with the least noise from the conversions around it.
        ("state dict torch → torch (identity)", torch, torch, weights),
        ("state dict torch → jax", torch, jax, weights),
        ("state dict torch → numpy", torch, numpy, weights),
        ("state dict jax → torch", jax, torch, in_jax),
        ("tf.data batch tensorflow → torch", tensorflow, torch, dict(batch(tf))),
    ]
    rows = [measure(title, s, d, tree, rounds, batch_ns) for title, s, d, tree in cases]
    record = env.machine()
    print(markdown(rows, record))
    if args.json:
        args.json.write_text(json.dumps({"machine": record, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
