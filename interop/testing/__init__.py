"""The conformance kit: the suite every adapter passes, ours and third parties' alike.

In a plugin's tests:

    from interop.testing import ConformanceSuite

    class TestMyFramework(ConformanceSuite):
        framework = "myframework"   # or: adapter = MyAdapter()

then `pytest` runs it against every other installed framework; or, without pytest,
`check(MyAdapter())` runs the same cases and returns a `Report` (raising `ConformanceError`
when a case fails). A failing adapter hook is named: `myframework.mutate raised TypeError: ...`.

For users' own code: `assert_close` compares tensors of any two frameworks,
`assert_same_across` runs one function's implementations in several frameworks and compares
their values and gradients, and the pytest plugin's `framework` fixture runs a test in every
framework (docs/testing.md).
"""

from .compare import assert_close, assert_same_across, tolerances
from .counting import COUNTER, counting_capsule
from .frameworks import Framework
from .hooks import HookError
from .report import CaseResult, ConformanceError, Report, check
from .suite import (
    DTYPES,
    LAYOUTS,
    SHAPES,
    ConformanceSuite,
    check_pair,
    explain_or_raise,
    usable_adapters,
)

__all__ = [
    "COUNTER",
    "CaseResult",
    "ConformanceError",
    "HookError",
    "Report",
    "DTYPES",
    "LAYOUTS",
    "SHAPES",
    "ConformanceSuite",
    "Framework",
    "assert_close",
    "assert_same_across",
    "check",
    "check_pair",
    "counting_capsule",
    "explain_or_raise",
    "tolerances",
    "usable_adapters",
]
