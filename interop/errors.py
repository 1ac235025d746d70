"""The library's error hierarchy: every failure a user can act on has its own type.

Each one also derives from the builtin a caller would naturally catch (TypeError for a wrong
argument type, ValueError for a wrong value, BufferError where the array API says so), so code
written against the frameworks' own exceptions keeps working.
"""

from __future__ import annotations


class InteropError(Exception):
    """Base of every error raised by interop-hub."""


class InvalidArgumentError(InteropError, TypeError):
    """An argument of the wrong type or value (`copy=1`, `to=3.5`): says which and why."""


class UnknownFrameworkError(InteropError, LookupError):
    """A target or source names a framework no adapter provides."""


class UnsupportedTensorError(InteropError, TypeError):
    """The object is not a tensor any adapter or DLPack route understands."""


class DLPackError(UnsupportedTensorError):
    """A DLPack capsule or producer is malformed, already consumed, or of an unknown major
    version."""


class CopyForbiddenError(InteropError, BufferError):
    """`copy=False` was asked but memory cannot be shared (a BufferError, as the array API says)."""


class UnsupportedDTypeError(InteropError, TypeError):
    """One side cannot hold the tensor's dtype."""


class UnsupportedLayoutError(InteropError, ValueError):
    """A layout no participant can share or copy."""


class DeviceError(InteropError, ValueError):
    """A device is malformed, missing, unsupported, or cannot be reached from the other side."""


class CastError(InteropError, ValueError):
    """A checked cast asked for with `dtypes=` met a value the target dtype cannot hold; the
    message names the value and its index (and `convert_tree`'s the leaf's path)."""


class AdapterError(InteropError):
    """An adapter failed to import or load, or broke its contract."""


class BrokenAdapterError(AdapterError):
    """The adapter for a framework is installed but broken; the message carries its load error."""


class FrameworkNotInstalledError(AdapterError, ImportError):
    """The adapter is there but its framework is not installed (an ImportError, as importing
    the framework would have raised)."""


class ReadOnlyMemoryError(InteropError, BufferError):
    """Read-only memory would reach a consumer that could write it (the flag would be lost)."""


class BridgedFunctionError(InteropError, RuntimeError):
    """A function wrapped by `interop.wrap` raised while running in its own framework; the
    original exception is chained as `__cause__` and the message names the function."""


class UnsupportedTransformError(InteropError, NotImplementedError):
    """A transformation `interop.wrap` cannot carry: forward-mode autodiff (`jax.jvp`/`jacfwd`,
    torch forward AD, `torch.func.jvp`), `torch.func.vmap`, `tf.function(jit_compile=True)`."""


class OutSpecError(InteropError, ValueError):
    """A wrapped function's outputs could not be known ahead (pass `out_spec`), or it returned
    something other than what `out_spec` announced."""


def describe(value: object) -> str:
    """The qualified name of an object's type, for messages."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
