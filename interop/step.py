"""The unit of a plan: one thing a conversion does, where, and why.

Its own module, at the bottom of the core, so that the adapter contract (whose sharding hooks
return steps) can name it without importing the planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Step:
    """One thing a conversion does, where, and why; `run` does it."""

    where: str
    why: str = ""
    action: ClassVar[str] = "step"

    def run(self, conv: Any) -> None:
        """Carry the step out on a conversion in progress (`interop.plan.Conversion`)."""

    def __str__(self) -> str:
        return f"{self.action} ({self.where})" + (f": {self.why}" if self.why else "")
