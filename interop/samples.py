"""Deterministic sample values for every dtype, in plain Python, for the matrix and the kit.

Adapters turn these into tensors with their framework's own constructors, so the values that
cross a conversion were made without this library's help.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from .dlpack import DTYPE_CODES

T = TypeVar("T")

#: dtypes framework constructors cannot build from Python numbers: made as float32, then cast
#: (every sample value of theirs is exact in float32)
VIA_FLOAT32 = frozenset(
    n for n in DTYPE_CODES if n.startswith(("bfloat", "float8_", "float6_", "float4_"))
)


def sample_values(dtype: str, shape: tuple[int, ...]) -> list[bool | int | float | complex]:
    """`prod(shape)` values, varied and exactly representable in `dtype` where possible."""
    count = math.prod(shape)
    raw = [(i * 37 + 11) % 251 for i in range(count)]
    if dtype == "bool":
        return [r % 3 == 0 for r in raw]
    if dtype.startswith("uint"):
        bits = int(dtype[4:])
        return [r % (1 << min(bits, 8)) for r in raw]
    if dtype.startswith("int"):
        bits = int(dtype[3:])
        return [((r + 8) % 256) - 128 if bits >= 8 else (r % 16) - 8 for r in raw]
    if dtype.startswith("complex"):
        return [complex((r - 120) / 8, (60 - r) / 16) for r in raw]
    if dtype.startswith(("float8_", "float6_", "float4_")):  # (not float64)
        return [((r % 15) - 7) / 2 for r in raw]
    return [(r - 120) / 8 for r in raw]


def build_sample(
    dtype: str,
    shape: tuple[int, ...],
    make: Callable[[list[Any], str], T],
    cast: Callable[[T, str], T],
) -> T:
    """A sample tensor built by a framework's own functions: `make(values, dtype)` returns a
    tensor of `shape` holding `values` (from `sample_values`); dtypes in VIA_FLOAT32 are made
    as float32 and converted with `cast(tensor, dtype)`."""
    values = sample_values(dtype, shape)
    if dtype in VIA_FLOAT32:
        return cast(make(values, "float32"), dtype)
    return make(values, dtype)


def indexed_views(x: Any, *, transpose: str = "T", negative: bool = True) -> dict[str, Any]:
    """The kit's layouts through NumPy-style indexing, which most array libraries share:
    a transpose (attribute `transpose`, 2-D and up), a step slice, an offset view and, where
    the framework has negative strides, a reversed view."""
    found = {"step-sliced": x[..., ::2], "offset": x[1:] if x.shape[0] > 1 else x[..., 1:]}
    if len(x.shape) >= 2:
        found["transposed"] = getattr(x, transpose)
    if negative:
        found["negative"] = x[::-1]
    return found
