"""The library's error hierarchy: every failure a user can act on has its own type."""

from __future__ import annotations


class InteropError(Exception):
    """Base of every error raised by interop-hub."""


class UnknownFrameworkError(InteropError, LookupError):
    """A target or source names a framework no adapter provides."""


class UnsupportedTensorError(InteropError, TypeError):
    """The object is not a tensor any adapter or DLPack route understands."""


class DLPackError(UnsupportedTensorError):
    """A DLPack capsule is malformed, already consumed, or of an unknown major version."""


class CopyForbiddenError(InteropError, BufferError):
    """`copy=False` was asked but memory cannot be shared (a BufferError, as the array API says)."""


class UnsupportedDTypeError(InteropError, TypeError):
    """One side cannot hold the tensor's dtype."""


class UnsupportedLayoutError(InteropError, ValueError):
    """A layout no participant can share or copy."""


class DeviceError(InteropError):
    """A device is missing, unsupported, or cannot be reached from the other side."""


class AdapterError(InteropError):
    """An adapter failed to import or load, or broke its contract."""


class BrokenAdapterError(AdapterError):
    """The adapter for a framework is installed but broken; the message carries its load error."""


class ReadOnlyMemoryError(InteropError, BufferError):
    """Read-only memory would reach a consumer that could write it (the flag would be lost)."""
