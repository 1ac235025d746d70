"""Forced copies per source framework: the bandwidth of conversions the plan must copy, against
`np.copyto` of the same bytes into fresh memory, timed in the same interleaved rounds.

Cases per source, where it has them:
- `copy=True` into every other framework;
- a non-compact (step-sliced) view into an importer that takes compact tensors only.

The reference copies the source's own memory, seen by NumPy zero-copy (strides kept), so that
both copy the same bytes from the same pages; where NumPy cannot see it, an array NumPy makes
(a step-sliced view of the same shape for the non-compact case).

The reference pays what any copy returning new memory pays (allocation, first-touch page
faults). Each conversion is run once first and checked to give fresh memory with the source's
values. Also shown, for information: the source framework's own copy (`clone`, `copy`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .installed import Framework, error_text, namespace
from .timing import Case, interleaved, paired

FRACTION = 0.8  # the target: at least this share of np.copyto's bandwidth
COPY_TRUE = "copy=True"
NON_COMPACT = "non-compact view"
#: importers tried, in order, for the non-compact case (the first that must copy is used)
COMPACT_ONLY = ("tensorflow", "mxnet", "jax", "paddle", "torch", "numpy")


@dataclass
class CopyResult:
    src: str
    case: str
    dst: str
    nbytes: int
    gbps: float | None = None  # the library's copy
    reference_gbps: float | None = None  # np.copyto into fresh memory
    fraction: float | None = None  # median of per-round reference time / library time
    own_gbps: float | None = None  # the source framework's own copy (information)
    copy_step: str = ""  # where the plan copies, as explain says it
    error: str | None = None
    skipped: str | None = None  # no such case here (not a failure)

    @property
    def ok(self) -> bool | None:
        if self.skipped:
            return None
        if self.error:
            return False
        return None if self.fraction is None else self.fraction >= FRACTION

    def json(self) -> dict[str, Any]:
        return dict(asdict(self), ok=self.ok)


def cases(src: Framework, frameworks: list[Framework]) -> list[tuple[str, Framework | None]]:
    """(case, target) for `src`; the target is None where no framework fits."""
    others = {fw.name: fw for fw in frameworks if fw is not src}
    if not others:
        return []
    out: list[tuple[str, Framework | None]] = []
    # NumPy first (the reference), then every other target: each pair's copy is the plan's
    first = sorted(others, key=lambda name: (name != "numpy", name))
    out.extend((COPY_TRUE, others[name]) for name in first)
    if src.spec.strided is not None:
        import interop

        view = src.spec.strided(16)
        target = None
        for name in COMPACT_ONLY:
            if name in others:
                plan = interop.explain(view, name)
                if plan.error is None and not plan.zero_copy:  # (refused outright: not this one)
                    target = others[name]
                    break
        out.append((NON_COMPACT, target))
    return out


def _own_memory(x: Any) -> Any:
    """`x`'s own memory as a NumPy array (strides kept), where it can be seen zero-copy: the
    reference then copies the very bytes the library copies. Memory from another allocator
    reads at another speed (torch's CPU memory gets no transparent huge pages, NumPy's large
    arrays do: 72% against 100% for the same copy), which is not the library's doing."""
    import interop

    if interop.explain(x, "numpy").zero_copy:  # (a refused plan copies nothing)
        return interop.convert(x, "numpy", copy=False)
    return None


def measure_case(
    case: str,
    src: Framework,
    dst: Framework,
    *,
    n: int,
    rounds: int,
    batch_ns: float,
    reference: Framework,
) -> CopyResult:
    """One forced copy of `n` float32 elements against `np.copyto` of the same bytes."""
    import numpy as np

    import interop

    result = CopyResult(src.name, case, dst.name, 4 * n)
    copy = True if case == COPY_TRUE else None
    strided = case == NON_COMPACT
    try:
        x = src.spec.strided(n) if strided and src.spec.strided else src.make(n)
        ref = _own_memory(x)
        if ref is None:
            ref = reference.spec.strided(n) if strided and reference.spec.strided else None
        if ref is None:
            ref = reference.make(n)
        plan = interop.explain(x, dst.name, copy=copy)
        if plan.zero_copy:
            raise AssertionError("the plan shares memory: no copy to measure")
        result.copy_step = "; ".join(str(s) for s in plan.steps if s.action == "copy")
        got = interop.convert(x, dst.name, copy=copy)
        if src.address(x) == dst.address(got):
            raise AssertionError("the result shares the source's memory")
        if dst.adapter.to_bytes(got) != src.adapter.to_bytes(x):
            raise AssertionError("the result's values differ from the source's")
        del got
        names = dict(namespace(src, dst), np=np, convert=interop.convert)
        extra = ", copy=True" if copy else ""
        timed = {
            "library": Case(dst.spec.waited(f"convert(x, {dst.name!r}{extra})"), x, names),
            "reference": Case("np.copyto(np.empty(x.shape, x.dtype), x)", ref, names),
        }
        if src.spec.copy:
            timed["own"] = Case(src.spec.waited(src.spec.copy.format(x="x")), x, names)
        # priming a batch of large copies costs one more copy each: only for small ones
        stats = interleaved(timed, rounds=rounds, batch_ns=batch_ns, warmup=1, prime=n < 2**20)
        result.gbps = result.nbytes / stats["library"].median
        result.reference_gbps = result.nbytes / stats["reference"].median
        result.fraction = paired(stats["reference"], stats["library"])[0]
        if "own" in stats:
            result.own_gbps = result.nbytes / stats["own"].median
    except Exception as exc:
        result.error = error_text(exc)
    return result


def measure(
    frameworks: list[Framework],
    *,
    n: int,
    rounds: int,
    batch_ns: float,
    log: Callable[[str], None],
) -> list[CopyResult]:
    """Every source's forced-copy cases at `n` float32 elements."""
    reference = next((fw for fw in frameworks if fw.name == "numpy"), None)
    if reference is None:
        log("  no NumPy: nothing to compare copies against")
        return []
    out = []
    for src in frameworks:
        for case, dst in cases(src, frameworks):
            if dst is None:
                r = CopyResult(src.name, case, "-", 4 * n, skipped="no importer here must copy it")
            else:
                r = measure_case(
                    case, src, dst, n=n, rounds=rounds, batch_ns=batch_ns, reference=reference
                )
            out.append(r)
            log(progress(r))
    return out


def progress(r: CopyResult) -> str:
    head = f"  {r.src:>10} {r.case:<16} -> {r.dst:<10}"
    if r.skipped:
        return f"{head} {r.skipped}"
    if r.error or r.gbps is None or r.reference_gbps is None or r.fraction is None:
        return f"{head} {r.error}"
    return (
        f"{head} {r.gbps:5.2f} GB/s, np.copyto {r.reference_gbps:5.2f} GB/s "
        f"({r.fraction:.0%} of it)"
    )
