"""The NumPy names MXNet 1.9.1 reads at import and NumPy 2 removed, restored only where missing.

MXNet 1.9.1 (the final release) binds these names at import time, so `import mxnet` fails on
NumPy >= 2 (and `numpy.bool` on NumPy 1.24 to 1.26). `apply()` adds each name NumPy lacks,
with its old meaning, and never replaces a name NumPy has: overriding one (`numpy.bool` under
NumPy 2, say) would break NumPy itself (`numpy.ma`). Under NumPy < 2 it adds nothing, or only
what that release lacks. Call it before the first `import mxnet`; importing `interop_mxnet`
does so.
"""

from __future__ import annotations

import builtins
import math
import warnings
from collections.abc import Callable
from typing import Any


def _removed_in_1_20(name: str) -> Callable[..., Any]:
    """What NumPy 1.20 to 1.26 gave for its removed financial functions: a stub that raises."""

    def removed(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"numpy.{name} was removed from NumPy in 1.20 (NEP 32); use numpy_financial.{name}"
        )

    removed.__name__ = removed.__qualname__ = name
    return removed


def _names(np: Any) -> dict[str, Any]:
    """Each name MXNet 1.9.1 reads from NumPy at import, with the value NumPy 1.x gave it.

    Functions are fresh wrappers, not aliases: MXNet registers `__array_function__`
    overrides keyed by these objects, and an alias would replace `numpy.all`'s entry.
    """

    def alltrue(*args: Any, **kwargs: Any) -> Any:
        return np.all(*args, **kwargs)

    def sometrue(*args: Any, **kwargs: Any) -> Any:
        return np.any(*args, **kwargs)

    def product(*args: Any, **kwargs: Any) -> Any:
        return np.prod(*args, **kwargs)

    def round_(*args: Any, **kwargs: Any) -> Any:
        return np.round(*args, **kwargs)

    def msort(a: Any) -> Any:
        return np.sort(a, axis=0)

    def in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False) -> Any:
        return np.isin(np.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert)

    def trapz(*args: Any, **kwargs: Any) -> Any:
        return np.trapezoid(*args, **kwargs)

    values: dict[str, Any] = {
        "PZERO": 0.0,
        "NZERO": -0.0,
        "PINF": math.inf,
        "NINF": -math.inf,
        "Inf": math.inf,
        "NAN": math.nan,
        "NaN": math.nan,
        "bool": builtins.bool,  # removed in NumPy 1.24 and back (as numpy.bool_) in 2.0
    }
    for function in (alltrue, sometrue, product, round_, msort, in1d, trapz):
        values[function.__name__] = function
    for name in ("mirr", "npv", "pmt", "ppmt", "pv", "rate"):
        values[name] = _removed_in_1_20(name)
    return values


#: Found by importing mxnet 1.9.1 and every submodule under NumPy 2.4 (and `bool` under 1.26).
NAMES: tuple[str, ...] = tuple(
    "PZERO NZERO PINF NINF Inf NAN NaN bool alltrue sometrue product round_ msort in1d trapz "
    "mirr npv pmt ppmt pv rate".split()
)


def has(np: Any, name: str) -> bool:
    """Whether NumPy gives `name` (its own module `__getattr__` included, warnings muted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(np, name)
        except AttributeError:
            return False
    return True


def missing(np: Any = None) -> list[str]:
    """The names MXNet needs that this NumPy lacks."""
    if np is None:
        import numpy as np
    return [name for name in NAMES if not has(np, name)]


def apply() -> list[str]:
    """Add the NumPy names MXNet needs and NumPy lacks; returns the names added (idempotent)."""
    import numpy as np

    added = missing(np)
    if added:
        values = _names(np)
        for name in added:
            setattr(np, name, values[name])
    return added
