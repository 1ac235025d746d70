"""The library's error hierarchy: every failure a user can act on has its own type.

Each one also derives from the builtin a caller would naturally catch (TypeError for a wrong
argument type, ValueError for a wrong value, BufferError where the array API says so), so code
written against the frameworks' own exceptions keeps working.
"""

from __future__ import annotations

import builtins
from typing import Any, TypeVar


class InteropError(Exception):
    """Base of every error raised by interop-hub."""

    #: TensorFlow's AutoGraph re-raises an exception from the code it converted (a
    #: `tf.function`'s) as its own `StagingError` where it cannot rebuild the type with a new
    #: message, as for ours; with this attribute it lets the exception through as raised
    ag_pass_through = True


class InvalidArgumentError(InteropError, TypeError):
    """An argument of the wrong type or value (`copy=1`, `to=3.5`): says which and why."""


class UnknownFrameworkError(InteropError, LookupError):
    """A target or source names a framework no adapter provides."""


class UnsupportedTensorError(InteropError, TypeError):
    """The object is not a tensor any adapter or DLPack route understands."""


class DLPackError(UnsupportedTensorError):
    """A DLPack capsule or producer is malformed, already consumed, or of an unknown major
    version."""


class CopyForbiddenError(InteropError, BufferError, ValueError):
    """`copy=False` was asked but memory cannot be shared: a BufferError, as the array API says,
    and a ValueError, as JAX's and MLX's `from_dlpack(copy=False)` raise."""


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


class ObjectStoreError(InteropError, ValueError):
    """A tensor an object store cannot carry as a buffer (`interop.ray`: a string tensor, a
    torch meta tensor), or cannot rebuild where it is read (a device this process lacks). The
    core's refusal is chained as `__cause__`; the message names the framework. A ValueError,
    not a TypeError: Ray replaces a TypeError raised while it pickles with its own."""


class BridgedFunctionError(InteropError, RuntimeError):
    """A function wrapped by `interop.wrap` raised while running in its own framework; the
    original exception is chained as `__cause__` and the message names the function."""


class UnsupportedTransformError(InteropError, NotImplementedError):
    """A transformation `interop.wrap` cannot carry: forward-mode autodiff (`jax.jvp`/`jacfwd`,
    torch forward AD, `torch.func.jvp`), `torch.func.vmap`, `tf.function(jit_compile=True)`."""


class GradientsUnsupportedError(UnknownFrameworkError):
    """`interop.wrap` named a framework whose adapter brings no gradient source (or target):
    its `grad_source()` (or `grad_target()`) hook returns None, so functions written with it
    cannot be wrapped (or wrapped functions cannot be called from it)."""


class OutSpecError(InteropError, ValueError):
    """A wrapped function's outputs could not be known ahead (pass `out_spec`), or it returned
    something other than what `out_spec` announced."""


class AlignedNumpyUnavailableError(InteropError, RuntimeError):
    """`interop.aligned_numpy()` cannot be had here (the pure-Python twin, an accelerator built
    without it, or a NumPy without the allocator hook of NEP 49): the message says what to do."""


def _rebuild(kind: type[InteropError], also: tuple[type[Exception], ...], args: Any) -> Any:
    return typed(kind, *also)(*args)


def _combinable(kind: type) -> bool:
    return (
        isinstance(kind, type)
        and issubclass(kind, Exception)
        and getattr(builtins, kind.__name__, None) is kind
        and kind is not Exception
    )


_TYPED: dict[tuple[type, ...], type[Any]] = {}


def typed(kind: type[InteropError], *also: type[Exception]) -> type[InteropError]:
    """`kind`, made also a subclass of the builtin exceptions `also`: what a framework's own
    import raises for the same input (`Capabilities.import_errors`, or a producer's own
    refusal), so `except BufferError` written for the frameworks keeps catching it. The class
    keeps `kind`'s name and pickles; raises TypeError for an `also` that is not a builtin
    exception, or that cannot be combined with `kind` or made from a message alone."""
    key = (kind, *also)
    made: type[Any] | None = _TYPED.get(key)
    if made is not None:
        return made
    for base in also:
        if not _combinable(base):
            raise TypeError(f"{base!r} is not a builtin exception type")
    # neither one `kind` already is, nor a base of another one asked for (MRO order)
    extra = tuple(
        b
        for b in dict.fromkeys(also)
        if not issubclass(kind, b) and not any(o is not b and issubclass(o, b) for o in also)
    )
    if not extra:
        _TYPED[key] = kind
        return kind

    def __reduce__(self: BaseException) -> Any:
        return _rebuild, (kind, extra, self.args)

    namespace = {
        "__module__": kind.__module__,
        "__qualname__": kind.__qualname__,
        "__doc__": kind.__doc__,
        "__reduce__": __reduce__,
    }
    made = type(kind.__name__, (kind, *extra), namespace)
    if str(made("a message")) != "a message":  # a base that prints its own fields
        raise TypeError(f"{extra} cannot carry a message")
    return _TYPED.setdefault(key, made)


def builtin_kind(exc: BaseException, kind: type[InteropError]) -> type[InteropError]:
    """`kind`, made also an instance of the nearest builtin class of `exc` that it can be
    combined with (a producer's BufferError, MXNetError's RuntimeError): for errors that wrap
    a framework's own exception."""
    for base in type(exc).__mro__:
        if _combinable(base):
            try:
                return typed(kind, base)
            except TypeError:  # not made from a message (UnicodeDecodeError): its base then
                continue
    return kind


E = TypeVar("E", bound=BaseException)


def bare(error: E) -> E:
    """`error` without its traceback: the frames would keep capsules and exported buffers
    (a bytearray stays locked) alive as long as a plan or an error lists it."""
    error.__traceback__ = None
    return error


def describe(value: object) -> str:
    """The qualified name of an object's type, for messages."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
