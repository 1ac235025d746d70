"""Every framework's tensors through Ray's object store as raw buffers, zero-copy on read.

Ray keeps NumPy arrays in its shared-memory object store out of band (pickle protocol 5) and
hands a reader on the same node a read-only NumPy view of that memory; any other framework's
tensor is pickled, copied on put and copied again on get. `install()` registers a Ray
serializer for the tensor types of each framework named (or imported): the tensor is stored
as the NumPy view of its memory (`interop.convert(x, "numpy")`, zero-copy on the host) plus
its framework's name, and read back with `interop.convert(view, framework)`, whose read-only
rules decide: JAX and TensorFlow share the store's memory; torch, Paddle, MXNet get a copy
(they can write, and the store's memory is mapped writable in every reader: a write would
change the object every other reader sees). `get(ref, to=...)` reads any object as another
framework's tensors the same way.

Only writers need `install()` (the driver, each actor or task that puts or returns tensors):
the deserializer is this module's `_restore`, which pickle imports by name in any reader.
NumPy arrays keep Ray's own path, and nothing changes for a program that never installs.
Docs: docs/ray.md.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import ray
from ray.util import deregister_serializer, register_serializer

from . import api
from .errors import InteropError, ObjectStoreError
from .info import CPU

__all__ = ["get", "install", "installed", "setup_hook", "uninstall"]

#: tensor type -> the framework whose serializer is registered for it
_INSTALLED: dict[type, str] = {}
#: set by `get(..., to=...)`: `_restore` then returns the NumPy view, converted by `get` itself
_RAW: ContextVar[bool] = ContextVar("interop_ray_raw", default=False)


def install(*frameworks: str) -> tuple[str, ...]:
    """Store the tensors of `frameworks` (names as `convert` takes them; none: every framework
    this process has imported, NumPy aside) in Ray as raw buffers. Call it in the driver and in
    each worker that puts or returns such tensors (`setup_hook` does it as workers start), after
    `ray.init` or before; again after importing another framework. Idempotent. Returns the
    frameworks installed so far, by name."""
    registry = api.HUB.registry
    adapters = [registry.get(name) for name in frameworks] or registry.imported()
    for adapter in adapters:
        if adapter.capabilities().pickled_out_of_band:  # Ray's own path stores them (NumPy)
            continue
        adapter.import_framework()
        for kind in adapter.tensor_types():
            if kind not in _INSTALLED:
                register_serializer(
                    kind, serializer=_serializer(adapter.name), deserializer=_restore
                )
                _INSTALLED[kind] = adapter.name
    return installed()


def uninstall() -> None:
    """Give every type `install` took back to Ray's default serialization (pickle)."""
    for kind in list(_INSTALLED):
        deregister_serializer(kind)
        del _INSTALLED[kind]


def installed() -> tuple[str, ...]:
    """The frameworks whose tensors this process stores as raw buffers, sorted."""
    return tuple(sorted(set(_INSTALLED.values())))


def setup_hook(*frameworks: str) -> Callable[[], None]:
    """A `worker_process_setup_hook` for `ray.init(runtime_env=...)` that runs
    `install(*frameworks)` in every worker as it starts (importing those frameworks there)."""

    def install_interop_serializers() -> None:
        install(*frameworks)

    return install_interop_serializers


def get(refs: Any, *, to: Any = None, timeout: float | None = None, **options: Any) -> Any:
    """`ray.get(refs)`, with every tensor in the result read as framework `to`'s (a tree of
    them too: the structure is kept). Zero-copy where `to` can hold read-only memory (JAX,
    TensorFlow, NumPy's read-only view); a copy where it can write (torch, Paddle, MXNet), so
    that no write reaches the stored object. `options` are `interop.convert_tree`'s (`copy=`,
    `device=`, `dtypes=`, `unsupported=`): `copy=False` refuses the copy instead."""
    if to is None:
        return _get(refs, timeout)
    api.HUB.target(to)  # an unknown framework fails before anything is read
    token = _RAW.set(True)
    try:
        value = _get(refs, timeout)
    finally:
        _RAW.reset(token)
    return api.convert_tree(value, to, **options)


def _get(refs: Any, timeout: float | None) -> Any:
    """`ray.get`, raising our own error where Ray reports it as its RaySystemError (what it
    makes of any exception raised while an object is unpickled)."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RaySystemError as exc:
        cause = getattr(exc, "client_exc", None)
        if isinstance(cause, InteropError):
            raise cause from cause.__cause__  # (Ray's wrapper stays its __context__)
        raise


def _serializer(name: str) -> Callable[[Any], tuple[str, Any, str | None]]:
    def serialize(x: Any) -> tuple[str, Any, str | None]:
        return _payload(x, name)

    return serialize


def _payload(x: Any, name: str) -> tuple[str, Any, str | None]:
    """(framework, NumPy view of the memory, the device it came from or None for the host).

    A view NumPy would pickle in band (neither C- nor Fortran-ordered) is compacted first, so
    that the store holds it out of band and readers map it without a copy. Memory on a device
    is copied to the host; the reader moves it back onto the same device."""
    try:
        device = api.inspect(x).device
        if device == CPU:
            view = api.convert(x, "numpy")
        else:
            view = api.convert(x, "numpy", device="cpu")
    except InteropError as exc:
        raise _refusal(name, exc) from exc
    if not (view.flags.c_contiguous or view.flags.f_contiguous):
        view = view.copy()
    return name, view, None if device == CPU else str(device)


def _restore(payload: tuple[str, Any, str | None]) -> Any:
    name, view, device = payload
    if _RAW.get():
        return view
    try:
        return api.convert(view, name, device=device)
    except InteropError as exc:
        raise _refusal(name, exc) from exc


def _refusal(name: str, exc: InteropError) -> ObjectStoreError:
    return ObjectStoreError(f"Ray cannot carry this {name} tensor as a buffer: {exc}")
