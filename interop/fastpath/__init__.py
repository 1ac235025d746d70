"""The warm path's two twins behind one interface, chosen once per hub.

A route replays what a plan decided (export, bridge, re-wrap, import) for tensors whose key
the plan approved; `interop.routes` decides which routes exist and keys them, a `FastPath`
builds and runs them. Two implementations pass the same tests, in the spirit of msgpack's
`_cmsgpack`/`fallback`: `compiled` (`interop._speedups`, keyed by a fingerprint of the
capsule, computed in C) and `pure` (routes written in Python, keyed by the source adapter's
`fingerprint(x)`). Nothing outside this package asks which one it has.
"""

from __future__ import annotations

from ..speedups import SPEEDUPS
from .interface import FastPath, Lesson, Route

__all__ = ["FastPath", "Lesson", "Route", "choose"]


def choose(compiled: bool | None = None) -> FastPath:
    """The compiled twin where it is built and not switched off (or refused by `compiled`
    False), else the pure one."""
    if SPEEDUPS is not None and compiled is not False:
        from .compiled import CompiledFastPath

        return CompiledFastPath(SPEEDUPS)
    from .pure import PureFastPath

    return PureFastPath()
