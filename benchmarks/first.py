"""The first call apart: in a fresh process per pair, the first `convert` after the frameworks
are imported, against the warm call.

`python -m benchmarks.first SRC DST` measures one pair and prints one JSON line:
- the frameworks' import, then one direct DLPack conversion (their own lazy initialisation:
  JAX's CPU client, TensorFlow's eager context), both timed apart: not the library's cost;
- `import interop`;
- the first `interop.convert` (entry points, adapter imports, plan building, the conversion);
- the second one, on a fresh tensor (the plan cached, the route learned);
- the first call of a second hub over the same, loaded registry: plan building alone;
- the warm call (median of a few hundred).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .env import ROOT, import_order  # first: TF quiet, JAX on the CPU

clock = time.perf_counter_ns
WARM_CALLS = 300


def _first_direct(source: Any, target: Any) -> int | None:
    """The first direct DLPack conversion of a fresh tensor (the first route that runs)."""
    from .frameworks import routes

    names = {**source.names, **target.names}
    for route in routes(source, target):
        if route.dlpack:
            x = source.make(1000)
            t0 = clock()
            try:
                eval(route.code, names, {"x": x})
            except Exception:
                continue
            return clock() - t0
    return None


def child(src: str, dst: str) -> dict[str, Any]:
    """Measure one pair in this (fresh) process."""
    from .frameworks import SPECS

    t0 = clock()
    specs = {m: SPECS[m]() for m in import_order([src, dst])}
    out: dict[str, Any] = {"import_frameworks_ns": clock() - t0}
    source, target = specs[src], specs[dst]
    out["first_direct_ns"] = _first_direct(source, target)
    preloaded = "interop" in sys.modules  # MXNet's NumPy 2 shim imports interop itself
    t0 = clock()
    import interop
    from interop import api
    from interop.engine import Hub

    out["import_interop_ns"] = None if preloaded else clock() - t0
    out["fast_path"] = api.accelerated()

    wait = target.wait != "{}"  # JAX: results are waited on

    def timed(convert: Callable[..., Any], x: Any) -> int:
        t0 = clock()
        result = convert(x, dst)
        if wait:
            result.block_until_ready()
        return clock() - t0

    out["first_convert_ns"] = timed(interop.convert, source.make(1000))
    out["second_convert_ns"] = timed(interop.convert, source.make(1000))
    out["plan_ns"] = timed(api.make_convert(Hub(api.HUB.registry)), source.make(1000))
    x = source.make(1000)
    out["warm_ns"] = statistics.median(timed(interop.convert, x) for _ in range(WARM_CALLS))
    return out


def measure(
    pairs: list[tuple[str, str]], *, repeats: int, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Each pair in `repeats` fresh processes; per figure, the median over them."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = []
    for src, dst in pairs:
        runs = []
        for _ in range(repeats):
            cmd = [sys.executable, "-m", "benchmarks.first", src, dst]
            try:
                done = subprocess.run(
                    cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
                )
            except subprocess.TimeoutExpired:
                runs.append({"error": "timed out after 300 s"})
                continue
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode or not lines:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                runs.append({"error": f"exit {done.returncode}: {tail[:200]}"})
            else:
                runs.append(json.loads(lines[-1]))
        row: dict[str, Any] = {"src": src, "dst": dst, "processes": len(runs)}
        good = [r for r in runs if "error" not in r]
        if not good:
            row["error"] = runs[-1]["error"]
        for key in good[0] if good else ():
            values = [r[key] for r in good if isinstance(r.get(key), (int, float))]
            row[key] = statistics.median(values) if values else good[0][key]
        out.append(row)
        log(progress(row))
    return out


def progress(row: dict[str, Any]) -> str:
    head = f"  {row['src']:>10} -> {row['dst']:<10}"
    if "error" in row:
        return f"{head} {row['error']}"
    return (
        f"{head} first convert {row['first_convert_ns'] / 1e6:7.2f} ms, plan alone "
        f"{row['plan_ns'] / 1e3:7.1f} us, warm {row['warm_ns'] / 1e3:6.2f} us"
    )


if __name__ == "__main__":
    print(json.dumps(child(*sys.argv[1:3])))
