"""`check(adapter)`: the conformance kit as one call, for an adapter object in this process.

The pytest form (`ConformanceSuite`) needs a test file and pytest's collection; `check` runs
the same tests, case by case, and returns a `Report` naming each failing case (raising
`ConformanceError` with it by default), so a plugin author can try an adapter from a REPL or
a script before packaging it.
"""

from __future__ import annotations

import inspect
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from interop.adapter import Adapter

from .suite import DTYPES, LAYOUTS, SHAPES, ConformanceSuite, Params

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class CaseResult:
    """One case of the kit: `test_pair[strict-numpy-float32-contiguous]`, its outcome, and
    the failure or the skip reason."""

    case: str
    outcome: str
    message: str = ""


@dataclass
class Report:
    """What `check` ran against one adapter."""

    adapter: str
    results: list[CaseResult] = field(default_factory=list)

    def _with(self, outcome: str) -> list[CaseResult]:
        return [r for r in self.results if r.outcome == outcome]

    @property
    def failures(self) -> list[CaseResult]:
        return self._with(FAILED)

    @property
    def passed(self) -> list[CaseResult]:
        return self._with(PASSED)

    @property
    def skipped(self) -> list[CaseResult]:
        return self._with(SKIPPED)

    @property
    def ok(self) -> bool:
        """No case failed, and one at least passed (a kit that skipped everything did not)."""
        return not self.failures and bool(self.passed)

    def __str__(self) -> str:
        counts = ", ".join(f"{len(self._with(o))} {o}" for o in (PASSED, FAILED, SKIPPED))
        lines = [f"the conformance kit on {self.adapter}: {counts}"]
        lines += [f"FAILED {r.case}: {r.message}" for r in self.failures]
        reasons = Counter(r.message for r in self.skipped)
        lines += [f"skipped {n} x: {why}" for why, n in reasons.most_common()]
        return "\n".join(lines)


class ConformanceError(AssertionError):
    """`check` found failing cases (or ran none): the message is the report."""

    def __init__(self, report: Report) -> None:
        super().__init__(str(report))
        self.report = report


def _marked(function: Any) -> dict[str, Params]:
    """The values `@pytest.mark.parametrize` gives a test's arguments."""
    found: dict[str, Params] = {}
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize":
            name, values = mark.args[:2]
            ids = mark.kwargs.get("ids") or [str(v) for v in values]
            found[name] = [(i, v, None) for i, v in zip(ids, values, strict=True)]
    return found


def _cases(method: Any, params: dict[str, Params]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(id, arguments, why skipped or "") for every case of one test method."""
    given = {**params, **_marked(method)}
    names = list(inspect.signature(method).parameters)
    for combo in itertools.product(*(given[n] for n in names)):
        case = "-".join(i for i, _, _ in combo)
        skip = next((why for _, _, why in combo if why), "")
        yield case, {n: v for n, (_, v, _) in zip(names, combo, strict=True)}, skip


def _outcome(method: Any, arguments: dict[str, Any]) -> tuple[str, str]:
    try:
        method(**arguments)
    except pytest.skip.Exception as exc:
        return SKIPPED, str(exc.msg)
    except pytest.fail.Exception as exc:
        return FAILED, str(exc.msg)
    except Exception as exc:  # the kit's assertions; anything else is a failure too
        return FAILED, f"{type(exc).__name__}: {exc}"
    return PASSED, ""


def check(
    adapter: Adapter,
    *,
    against: Iterable[str] | None = None,
    dtypes: Iterable[str] = DTYPES,
    shapes: Iterable[tuple[int, ...]] = SHAPES,
    layouts: Iterable[str] = LAYOUTS,
    device: str = "cpu",
    raise_on_failure: bool = True,
) -> Report:
    """Run the conformance kit against `adapter` (registered with `interop.register` if its
    name does not find it yet) and every other installed framework usable on `device` (or
    those `against` names), on `dtypes` x `shapes` x `layouts`: the tests of
    `ConformanceSuite`, in its worker process where the worker can import the adapter's class,
    else here. Raises ConformanceError with the report when a case failed or none passed,
    unless `raise_on_failure` is False."""
    settings = {
        "adapter": adapter,
        "against": None if against is None else tuple(against),
        "dtypes": tuple(dtypes),
        "shapes": tuple(tuple(s) for s in shapes),
        "layouts": tuple(layouts),
        "device": device,
    }
    suite = type(f"Check_{adapter.name}", (ConformanceSuite,), settings)()
    report = Report(adapter.name)
    params = suite.parameters()
    if isinstance(params, str):
        report.results.append(CaseResult("*", SKIPPED, params))
    else:
        for test in sorted(n for n in dir(ConformanceSuite) if n.startswith("test_")):
            method = getattr(suite, test)
            for case, arguments, skip in _cases(method, params):
                outcome = (SKIPPED, skip) if skip else _outcome(method, arguments)
                report.results.append(CaseResult(f"{test}[{case}]", *outcome))
    if raise_on_failure and not report.ok:
        raise ConformanceError(report)
    return report
