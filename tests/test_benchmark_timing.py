"""The benchmark's statistics: the interval around a paired median, and the added rounds for
a pair whose verdict that interval leaves open. No timing is asserted about interop itself:
the statements timed here are busy-waits of known length."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import overhead
from benchmarks.timing import Case, Stats, median_interval


def test_the_interval_is_the_order_statistics_the_binomial_gives():
    # P(Binomial(21, 1/2) <= 5) = 0.013 <= 0.025 < P(<= 6) = 0.039: the 6th and 16th of 21;
    # of 100, the 40th and 61st (the textbook pair); below 6 values, the whole range
    assert median_interval([float(v) for v in range(1, 22)]) == (6.0, 16.0)
    assert median_interval([float(v) for v in range(100, 0, -1)]) == (40.0, 61.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_the_interval_holds_the_median_at_least_as_often_as_it_says():
    rng = random.Random(10)
    true_median = 1.0  # of the exponential distribution of rate ln 2: skewed, as timings are
    trials, held = 2000, 0
    for _ in range(trials):
        low, high = median_interval([rng.expovariate(0.6931471805599453) for _ in range(21)])
        held += low <= true_median <= high
    assert held / trials >= 0.95


def test_extended_stats_pool_both_rounds():
    a = Stats(2.0, 1.0, 3.0, 1.0, 10, 3, [1.0, 2.0, 3.0])
    b = Stats(20.0, 20.0, 20.0, 20.0, 12, 2, [20.0, 20.0])
    both = a.extended(b)
    assert both.samples == [1.0, 2.0, 3.0, 20.0, 20.0]
    assert (both.rounds, both.median, both.batch) == (5, 3.0, 12)


def test_a_verdict_is_decided_only_when_both_ends_agree():
    pure_line = overhead.PURE_US * 1e3
    assert overhead.decided(overhead.PURE, (1.0, 1.0), (-500.0, pure_line - 1), 600.0)
    assert overhead.decided(overhead.PURE, (1.0, 1.0), (pure_line + 1, 5000.0), 600.0)
    assert not overhead.decided(overhead.PURE, (1.0, 1.0), (0.0, pure_line + 1), 600.0)
    # compiled, on a direct call over 1.5 us: the ratio decides where the difference does not
    slow = overhead.SLOW_DIRECT_US * 1e3 + 1
    assert overhead.decided(overhead.COMPILED, (0.9, 1.1), (-2000.0, 5000.0), 60_000.0)
    assert not overhead.decided(overhead.COMPILED, (0.9, 1.3), (-2000.0, 5000.0), slow)
    assert not overhead.decided(overhead.COMPILED, (0.9, 1.1), (0.0, 400.0), 600.0)


def _spin(us: float) -> None:
    end = time.perf_counter_ns() + us * 1e3
    while time.perf_counter_ns() < end:
        pass


def _cases(path_us: object) -> dict[str, Case]:
    rng = random.Random(3)
    names = {"spin": _spin, "rng": rng, "path_us": path_us}
    return {
        "loop": Case("pass", None, names),
        "direct": Case("spin(rng.uniform(2, 30))", None, names),
        overhead.PURE: Case("spin(path_us())", None, names),
    }


def test_a_pair_far_from_its_line_keeps_the_runs_rounds(monkeypatch):
    # 90 us against a direct call of 2 to 30 us: every round's difference is over the line.
    # The rounds are given, not timed: on cores other test workers share, a busy-wait of a
    # few us is preempted for longer than the whole margin now and then
    rng = random.Random(3)
    direct = [rng.uniform(2_000.0, 30_000.0) for _ in range(7)]
    calls = []

    def rounds_of(cases, *, rounds, batch_ns):
        calls.append(rounds)
        times = {
            "loop": [10.0] * rounds,
            "direct": direct[:rounds],
            overhead.PURE: [90_000.0] * rounds,
        }
        return {name: Stats(0, 0, 0, 0, 1, rounds, times[name]) for name in cases}

    monkeypatch.setattr(overhead, "interleaved", rounds_of)
    cases = _cases(lambda: 90.0)
    first = rounds_of(cases, rounds=7, batch_ns=1)
    timed = overhead._until_decided(cases, first, [overhead.PURE], "direct", 7, 1)
    assert timed[overhead.PURE].rounds == 7 and calls == [7]


def test_a_pair_whose_interval_straddles_its_line_gets_more_rounds(monkeypatch):
    # the direct call 50 us, the path 40 and 60 us in turn (as often): the median
    # difference, 0 or so, is under the 1 us line, its interval (-10, +10) never is
    calls = []

    def rounds_of(cases, *, rounds, batch_ns):
        calls.append(sorted(cases))
        path = [40_000.0 if i % 2 else 60_000.0 for i in range(rounds)]
        times = {"loop": [10.0] * rounds, "direct": [50_000.0] * rounds, overhead.PURE: path}
        return {name: Stats(0, 0, 0, 0, 1, rounds, times[name]) for name in cases}

    monkeypatch.setattr(overhead, "interleaved", rounds_of)
    cases = _cases(lambda: 0.0)
    first = rounds_of(cases, rounds=8, batch_ns=1)
    timed = overhead._until_decided(cases, first, [overhead.PURE], "direct", 8, 1)
    assert timed[overhead.PURE].rounds == overhead.EXTEND_UP_TO * 8
    assert len(timed["direct"].samples) == len(timed["loop"].samples) == 8 * overhead.EXTEND_UP_TO
    assert calls[1:] == [sorted(["loop", "direct", overhead.PURE])] * (overhead.EXTEND_UP_TO - 1)
