"""The failures particular to gradients across frameworks (defined with the rest of the
hierarchy in interop/errors.py; re-exported here: `interop.grad.UnsupportedTransformError`, ...)."""

from __future__ import annotations

from ..errors import (
    BridgedFunctionError,
    GradientsUnsupportedError,
    OutSpecError,
    UnsupportedTransformError,
)

__all__ = [
    "BridgedFunctionError",
    "GradientsUnsupportedError",
    "OutSpecError",
    "UnsupportedTransformError",
]
