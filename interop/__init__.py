"""interop-hub: move tensors between deep-learning frameworks through DLPack, zero-copy when
memory can be shared and with an explained copy when it cannot."""

from __future__ import annotations

from .adapter import Adapter, Capabilities
from .api import adapters, convert, explain, inspect, register
from .errors import (
    AdapterError,
    BrokenAdapterError,
    CopyForbiddenError,
    DeviceError,
    DLPackError,
    InteropError,
    ReadOnlyMemoryError,
    UnknownFrameworkError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
    UnsupportedTensorError,
)
from .grad import wrap
from .info import Device, TensorInfo
from .plan import Plan, Step
from .registry import AdapterInfo

__version__ = "0.1.0"

__all__ = [
    "Adapter",
    "AdapterError",
    "AdapterInfo",
    "BrokenAdapterError",
    "Capabilities",
    "CopyForbiddenError",
    "DLPackError",
    "Device",
    "DeviceError",
    "InteropError",
    "Plan",
    "ReadOnlyMemoryError",
    "Step",
    "TensorInfo",
    "UnknownFrameworkError",
    "UnsupportedDTypeError",
    "UnsupportedLayoutError",
    "UnsupportedTensorError",
    "adapters",
    "convert",
    "explain",
    "inspect",
    "register",
    "wrap",
]
