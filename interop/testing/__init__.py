"""The conformance kit: the suite every adapter passes, ours and third parties' alike.

In a plugin's tests::

    from interop.testing import ConformanceSuite

    class TestMyFramework(ConformanceSuite):
        framework = "myframework"

then `pytest` runs it against every other installed framework.
"""

from .counting import COUNTER, counting_capsule
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
    "DTYPES",
    "LAYOUTS",
    "SHAPES",
    "ConformanceSuite",
    "check_pair",
    "counting_capsule",
    "explain_or_raise",
    "usable_adapters",
]
