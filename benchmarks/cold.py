"""One cold measurement in a fresh process: `python -m benchmarks.cold SRC DST MODE`.

SRC and DST are adapter names, or `name:module` when the framework's module has another name.

The frameworks are imported first (timed apart: that is not the library's cost), then
`interop`, then the first call, then warm calls. Modes:

- convert: the first `interop.convert` (entry points, adapter imports, plan building and the
  conversion itself), a second call, and the warm median;

in every mode, one direct conversion runs first (timed apart), so the frameworks' own lazy
initialisation is not counted as the library's;
- explain: the first `interop.explain`, then the first convert (its plan now cached), and the
  warm explain median;
- stages: the first call split into registry discovery, target adapter, source adapter, plan,
  conversion.

Prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from .env import import_order  # first: TF quiet, JAX on CPU

clock = time.perf_counter_ns


def _warm(fn, x, n: int = 300) -> float:
    times = []
    for _ in range(n):
        t0 = clock()
        fn(x)
        times.append(clock() - t0)
    return statistics.median(times)


def _first_direct(source, target) -> float | None:
    """Time of the first direct DLPack conversion of a fresh tensor (the first route that
    runs), or None when no route runs."""
    from .frameworks import routes

    names = {**source.names, **target.names}
    for route in routes(source, target):
        if not route.dlpack:
            continue
        x = source.make(1000)
        t0 = clock()
        try:
            eval(route.code, names, {"x": x})
        except Exception:
            continue
        return clock() - t0
    return None


def main(argv: list[str]) -> dict[str, float | None]:
    (src, _, src_module), (dst, _, dst_module) = (a.partition(":") for a in argv[:2])
    mode = argv[2]
    from .frameworks import spec_for

    t0 = clock()
    specs = {m: spec_for(m) for m in import_order([src_module or src, dst_module or dst])}
    source, target = specs[src_module or src], specs[dst_module or dst]
    t1 = clock()
    out: dict[str, float | None] = {"import_frameworks_ns": t1 - t0}
    assert source is not None and target is not None
    # The frameworks' own first conversion (their lazy initialisation: JAX's CPU client,
    # TensorFlow's eager context), so that the library's first call below pays only its own.
    out["first_direct_ns"] = _first_direct(source, target)
    preloaded = "interop" in sys.modules  # the MXNet shim imports interop itself
    t1 = clock()
    import interop

    t2 = clock()
    out["import_interop_ns"] = None if preloaded else t2 - t1
    x = source.make(1000)
    wait = target.wait != "{}"

    def convert(v):
        result = interop.convert(v, dst)
        return result.block_until_ready() if wait else result

    if mode == "convert":
        fresh = source.make(1000)
        t3 = clock()
        convert(x)
        t4 = clock()
        convert(fresh)  # a second tensor: plan cached, first-call effects of its own gone
        t5 = clock()
        out.update(first_convert_ns=t4 - t3, second_convert_ns=t5 - t4)
        out["warm_convert_ns"] = _warm(convert, x)
    elif mode == "explain":
        t3 = clock()
        interop.explain(x, dst)
        t4 = clock()
        convert(x)
        t5 = clock()
        out.update(first_explain_ns=t4 - t3, first_convert_after_explain_ns=t5 - t4)
        out["warm_explain_ns"] = _warm(lambda v: interop.explain(v, dst), x)
    elif mode == "stages":
        from interop.registry import REGISTRY

        t3 = clock()
        REGISTRY._discover()
        t4 = clock()
        REGISTRY.get(dst)
        t5 = clock()
        REGISTRY.detect(x)
        t6 = clock()
        interop.explain(x, dst)
        t7 = clock()
        convert(x)
        t8 = clock()
        out.update(
            discover_entry_points_ns=t4 - t3,
            load_target_adapter_ns=t5 - t4,
            detect_source_adapter_ns=t6 - t5,
            build_plan_ns=t7 - t6,
            first_convert_ns=t8 - t7,
        )
        out["warm_convert_ns"] = _warm(convert, x)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
