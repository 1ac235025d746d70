"""Reference values for `Adapter.exercise`, computed with NumPy from a source's bytes alone.

The kit compares a target framework's own `x + x` (logical not for booleans) bit for bit and
its own sum within a rounding bound, so that every converted tensor is used by a kernel, not
just read back: a buffer that reads back fine can still abort or mislead the first kernel.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from interop.dlpack import dtype_bits

#: unit roundoff of each float format, for the bound on a sum's rounding error
EPSILON = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
    "complex64": 2.0**-24,
    "complex128": 2.0**-53,
}


def _ml_dtype(dtype: str) -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return getattr(ml_dtypes, dtype, None)


def values(dtype: str, raw: bytes) -> list[Any] | None:
    """The elements of `raw` as Python numbers (None for a dtype NumPy cannot read here)."""
    import numpy as np

    if dtype == "bool":
        return [bool(b) for b in raw]
    if dtype == "bfloat16":
        wide = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return wide.view(np.float32).tolist()
    if hasattr(np, dtype) and dtype.startswith(("int", "uint", "float", "complex")):
        return np.frombuffer(raw, dtype).tolist()
    exotic = _ml_dtype(dtype)
    if exotic is None:
        return None
    return np.frombuffer(raw, exotic).astype(np.float32).tolist()


def doubled(dtype: str, raw: bytes) -> bytes | None:
    """The bytes of `x + x` (of `not x` for booleans), or None if NumPy cannot say here.

    Doubling is exact in every float format (only the exponent changes) and wraps around in
    integer formats, as every framework's kernels do.
    """
    import numpy as np

    if dtype == "bool":
        return bytes(int(not b) for b in raw)
    if dtype == "bfloat16":  # NumPy has none: double it as float32, whose top half it is
        wide = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        return ((wide * 2).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if hasattr(np, dtype) and dtype.startswith(("int", "uint", "float", "complex")):
        array = np.frombuffer(raw, dtype)
        with np.errstate(over="ignore"):
            return (array + array).tobytes()
    exotic = _ml_dtype(dtype)
    if exotic is None:
        return None
    array = np.frombuffer(raw, exotic)
    return (array + array).tobytes()


def _decode_float(dtype: str, got: bytes) -> tuple[complex, str] | None:
    """A framework's 0-d sum as a number and the format it is in: the source's format when
    the width matches, else the IEEE format of that width (an accumulator the framework
    chose); None when it cannot be read here."""
    width = len(got)
    complex_source = dtype.startswith("complex")
    if width * 8 == dtype_bits(dtype):
        fmt = dtype
    elif complex_source:
        fmt = {8: "complex64", 16: "complex128"}.get(width, "")
    else:
        fmt = {2: "float16", 4: "float32", 8: "float64"}.get(width, "")
    if fmt == "bfloat16":
        return struct.unpack("<f", b"\0\0" + got)[0], fmt
    if fmt in ("float16", "float32", "float64"):
        return struct.unpack("<" + {2: "e", 4: "f", 8: "d"}[width], got)[0], fmt
    if fmt in ("complex64", "complex128"):
        real, imag = struct.unpack("<" + ("ff" if width == 8 else "dd"), got)
        return complex(real, imag), fmt
    exotic = _ml_dtype(fmt)
    if exotic is None:
        return None
    import numpy as np

    return float(np.frombuffer(got, exotic).astype(np.float64)[0]), fmt


def total_mismatch(dtype: str, raw: bytes, got: bytes) -> str | None:
    """Why `got` (the bytes of a framework's 0-d sum of `raw`) is wrong, or None if it is right.

    Integer sums (and boolean counts) must equal the exact sum modulo the width the framework
    chose (TensorFlow sums int8 in int8). Float sums must lie within (n + 1)·ε·Σ|x| of the
    exactly rounded sum, a bound on any summation order's rounding error.
    """
    elements = values(dtype, raw)
    if elements is None:
        return None
    if dtype == "bool" or dtype.startswith(("int", "uint")):
        count = sum(int(v) for v in elements)
        if len(got) not in (1, 2, 4, 8):
            return f"the sum has {len(got)} bytes, not an integer's 1, 2, 4 or 8"
        unsigned = int.from_bytes(got, "little")
        if (unsigned - count) % (1 << (8 * len(got))):
            signed = int.from_bytes(got, "little", signed=True)
            return f"the sum is {signed} (unsigned {unsigned}); the exact sum is {count}"
        return None
    decoded = _decode_float(dtype, got)
    if decoded is None:
        return None
    value, fmt = decoded
    parts = [complex(v) for v in elements]
    bound = (len(parts) + 1) * EPSILON.get(fmt, 2.0**-3)
    for name, pick in (("real", lambda c: c.real), ("imaginary", lambda c: c.imag)):
        exact = math.fsum(pick(c) for c in parts)
        scale = math.fsum(abs(pick(c)) for c in parts)
        got_part = pick(complex(value))
        if not abs(got_part - exact) <= bound * scale:
            return f"the sum's {name} part is {got_part!r}; the exact sum is {exact!r} ({fmt})"
    return None
