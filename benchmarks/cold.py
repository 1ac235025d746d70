"""One cold measurement in a fresh process: `python -m benchmarks.cold SRC DST MODE`.

SRC and DST are adapter names, or `name:module` when the framework's module has another name.

The frameworks are imported first (timed apart: that is not the library's cost), then
`interop`, then the first call, then warm calls. Modes:

- convert: the first `interop.convert` (entry points, adapter imports, plan building and the
  conversion itself), a second call, and the warm median;
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

from . import env  # noqa: F401  (environment first: TF quiet, JAX on CPU)

clock = time.perf_counter_ns


def _warm(fn, x, n: int = 300) -> float:
    times = []
    for _ in range(n):
        t0 = clock()
        fn(x)
        times.append(clock() - t0)
    return statistics.median(times)


def main(argv: list[str]) -> dict[str, float]:
    (src, _, src_module), (dst, _, dst_module) = (a.partition(":") for a in argv[:2])
    mode = argv[2]
    from .frameworks import spec_for

    t0 = clock()
    source, target = spec_for(src_module or src), spec_for(dst_module or dst)
    t1 = clock()
    import interop

    t2 = clock()
    out: dict[str, float] = {"import_frameworks_ns": t1 - t0, "import_interop_ns": t2 - t1}
    assert source is not None and target is not None
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
