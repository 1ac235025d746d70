"""Interleaved timing: several statements measured in alternating batches in one process.

Each statement is compiled into its own loop (as `timeit` does), so no wrapper call is
timed. A round runs one batch of every statement, in an order that rotates and reverses from
round to round, so drifts in machine load hit every statement alike; the per-call time of a
statement is the median of its batches. Short batches and many rounds keep the median clear
of the batches a busy machine preempts. Garbage collection is off during a measurement (the
young generation is collected between rounds). `time.perf_counter_ns` is the clock.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_LOOP = """
def _loop(x, _n, _clock=_clock):
    {prime}
    _t0 = _clock()
    for _ in range(_n):
        {stmt}
    return _clock() - _t0
"""

LOOP_OVERHEAD = "pass"
CONFIDENCE = 0.95  # of the intervals around paired medians


def compile_loop(
    stmt: str, namespace: dict[str, Any], *, prime: bool = True
) -> Callable[[Any, int], int]:
    """A function `(x, n) -> ns` that runs `stmt` n times inline and returns the time taken.

    With `prime`, the statement runs once more before the clock starts, so the batch does not
    pay for the caches and branch predictors the previous statement left cold.
    """
    scope = dict(namespace)
    scope["_clock"] = time.perf_counter_ns
    source = _LOOP.format(stmt=stmt, prime=stmt if prime else "pass")
    exec(compile(source, f"<bench: {stmt}>", "exec"), scope)
    return scope["_loop"]


@dataclass
class Stats:
    """Per-call times of one statement, in nanoseconds."""

    median: float
    p25: float
    p75: float
    low: float
    batch: int
    rounds: int
    samples: list[float]

    def extended(self, more: Stats) -> Stats:
        """These rounds and `more`'s (measured later, in the same rounds as their pairs')."""
        return _stats(self.samples + more.samples, more.batch)

    def json(self) -> dict[str, Any]:
        return {
            "median_ns": round(self.median, 1),
            "p25_ns": round(self.p25, 1),
            "p75_ns": round(self.p75, 1),
            "min_ns": round(self.low, 1),
            "calls_per_batch": self.batch,
            "rounds": self.rounds,
        }


def _stats(samples: list[float], batch: int) -> Stats:
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        p25, p75 = q[0], q[2]
    else:
        p25, p75 = ordered[0], ordered[-1]
    return Stats(statistics.median(ordered), p25, p75, ordered[0], batch, len(ordered), samples)


@dataclass
class Case:
    """A statement to time, with the `x` it runs on."""

    stmt: str
    x: Any
    namespace: dict[str, Any]


def _calibrate(loop: Callable[[Any, int], int], x: Any, target_ns: float, cap: int) -> int:
    n = 1
    while True:
        elapsed = loop(x, n)
        if elapsed >= target_ns / 4 or n >= cap:
            break
        n *= 4
    return max(1, min(cap, round(n * target_ns / max(elapsed, 1))))


def interleaved(
    cases: dict[str, Case],
    *,
    rounds: int,
    batch_ns: float,
    warmup: int = 2,
    max_batch: int = 200_000,
    min_batch: int = 1,
    prime: bool = True,
) -> dict[str, Stats]:
    """Median per-call time of each case, measured in alternating batches of ~`batch_ns`
    (at least `min_batch` calls)."""
    loops = {
        name: compile_loop(case.stmt, case.namespace, prime=prime) for name, case in cases.items()
    }
    batches = {}
    for name, loop in loops.items():
        loop(cases[name].x, 1)  # first call outside calibration (lazy imports, caches)
        batches[name] = max(min_batch, _calibrate(loop, cases[name].x, batch_ns, max_batch))
    names = list(loops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for index in range(warmup + rounds):
            shift = index % len(names)
            order = names[shift:] + names[:shift]
            if index % 2:
                order.reverse()
            for name in order:
                n = batches[name]
                elapsed = loops[name](cases[name].x, n)
                if index >= warmup:
                    samples[name].append(elapsed / n)
            gc.collect(0)  # young garbage only: cheap, outside the batches
    finally:
        if enabled:
            gc.enable()
    return {name: _stats(samples[name], batches[name]) for name in names}


def _per_round(a: Stats, b: Stats, loop: float) -> tuple[list[float], list[float]]:
    """Each round's a/b and a-b (less the loop's cost)."""
    ratios, diffs = [], []
    for x, y in zip(a.samples, b.samples, strict=True):
        x, y = max(x - loop, 0.0), max(y - loop, 0.0)
        diffs.append(x - y)
        if y > 0:
            ratios.append(x / y)
    return ratios, diffs


def paired(a: Stats, b: Stats, loop: float = 0.0) -> tuple[float, float]:
    """Median over rounds of a/b and of a-b, each round's two batches taken side by side
    (less the loop's cost): slow drifts in machine load cancel out."""
    ratios, diffs = _per_round(a, b, loop)
    return (statistics.median(ratios) if ratios else float("nan")), statistics.median(diffs)


def paired_intervals(
    a: Stats, b: Stats, loop: float = 0.0, confidence: float = CONFIDENCE
) -> tuple[tuple[float, float], tuple[float, float]]:
    """`paired`'s two medians as intervals: (ratio low, high), (difference low, high)."""
    ratios, diffs = _per_round(a, b, loop)
    nan = (float("nan"), float("nan"))
    return (median_interval(ratios, confidence) if ratios else nan), median_interval(
        diffs, confidence
    )


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """An interval that holds the true median of what `values` sample with at least this
    probability, whatever their distribution (order statistics: the number of values below
    the median is binomial(n, 1/2)). Below 6 values no pair of order statistics reaches 95 %:
    their whole range."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    below = 0.0  # P(at most `k` values fall below the median)
    k = -1
    while k + 1 < n // 2:
        term = math.comb(n, k + 1) / 2**n
        if below + term > tail:
            break
        below += term
        k += 1
    low = max(k, 0)
    return ordered[low], ordered[n - 1 - low]


def once_ns(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Time one call (for cold measurements); returns (ns, result)."""
    t0 = time.perf_counter_ns()
    result = fn()
    return time.perf_counter_ns() - t0, result
