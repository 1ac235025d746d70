"""Reading, creating and bridging DLPack capsules through CPython's capsule API.

MXNet rebinds `ctypes.pythonapi.PyCapsule_*` prototypes globally when imported, so every call
here goes through private prototypes bound once in this module. Memory ownership follows the
Python DLPack spec: a consumer renames the capsule it takes to ``used_dltensor[_versioned]``
and from then on owns the deleter; an unconsumed capsule calls the deleter when it dies.
"""

from __future__ import annotations

import ctypes
import datetime
import queue
import struct
import threading
from typing import Any

from . import dlpack as dl
from .errors import DLPackError, ReadOnlyMemoryError
from .speedups import SPEEDUPS

#: The type of every PyCapsule (``types.CapsuleType`` only exists from Python 3.13).
CapsuleType: type = type(datetime.datetime_CAPI)


def _bind(name: str, restype: Any, *argtypes: Any) -> Any:
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_get_name = _bind("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
_get_pointer = _bind("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_set_name = _bind("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_new = _bind("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# The destructor sees a capsule whose refcount is already zero: touch it only as a raw pointer.
_raw_is_valid = _bind("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_get_pointer = _bind("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)


def is_capsule(obj: object) -> bool:
    return type(obj) is CapsuleType


def capsule_name(capsule: object) -> bytes:
    """The capsule's name (b"dltensor", b"used_dltensor_versioned", ...)."""
    return _get_name(capsule) or b""


def pointer(capsule: object, expect_versioned: bool | None = None) -> tuple[int, bool]:
    """(address of the managed tensor, is it versioned) of an unconsumed DLPack capsule.

    With `expect_versioned` (the kind just asked of the producer) the common case costs one
    C call instead of two.
    """
    if type(capsule) is not CapsuleType:
        raise DLPackError(
            f"expected a DLPack capsule, got a {type(capsule).__module__}."
            f"{type(capsule).__qualname__}"
        )
    if expect_versioned is not None:
        try:
            name = dl.VERSIONED_NAME if expect_versioned else dl.LEGACY_NAME
            return _get_pointer(capsule, name), expect_versioned
        except ValueError:
            pass  # another kind, or not a DLPack capsule: say which below
    name = capsule_name(capsule)
    if name == dl.VERSIONED_NAME:
        return _get_pointer(capsule, dl.VERSIONED_NAME), True
    if name == dl.LEGACY_NAME:
        return _get_pointer(capsule, dl.LEGACY_NAME), False
    if name in (dl.USED_LEGACY_NAME, dl.USED_VERSIONED_NAME):
        raise DLPackError(
            f"this DLPack capsule was already consumed (its name is {name.decode()!r})"
        )
    raise DLPackError(f"not a DLPack capsule: its name is {name.decode(errors='replace')!r}")


def mark_used(capsule: object, versioned: bool) -> None:
    """Rename a capsule whose managed tensor we took over, so its destructor leaves it alone."""
    _set_name(capsule, dl.USED_VERSIONED_NAME if versioned else dl.USED_LEGACY_NAME)


def managed(address: int, versioned: bool) -> Any:
    """The managed-tensor struct at `address`, viewed in place."""
    kind = dl.DLManagedTensorVersioned if versioned else dl.DLManagedTensor
    return kind.from_address(address)


def call_deleter(address: int, versioned: bool) -> None:
    """Release a managed tensor through its own deleter (a NULL deleter means nothing to free)."""
    deleter = _callable(managed(address, versioned).deleter)
    if deleter is not None:
        deleter(address)


#: deleter address -> its ctypes callable: deleters are a few functions, one per producer
#: library, and making the callable costs 0.13 us of the 4.7 a pure-Python release takes
_DELETERS: dict[int, Any] = {}


def _callable(deleter: int | None) -> Any:
    if not deleter:
        return None
    call = _DELETERS.get(deleter)
    if call is None:
        call = dl.DELETER(deleter)
        if len(_DELETERS) < 64:  # (a producer making a deleter per tensor: not kept)
            _DELETERS[deleter] = call
    return call


def new_capsule(address: int, versioned: bool, destructor: int | None = None) -> object:
    """A fresh DLPack capsule owning the managed tensor at `address` (deleted once if unused).

    `destructor`: the address of the capsule destructor to use instead of the core's (a
    producer's own, which releases an unconsumed tensor just as the core's would)."""
    name = dl.VERSIONED_NAME if versioned else dl.LEGACY_NAME
    return _new(address, name, _DESTRUCTOR if destructor is None else destructor)


# --- bridging between the two capsule kinds ----------------------------------------------------
# A bridge struct lives here until its consumer calls its deleter; that deleter then releases
# the producer's managed tensor exactly once: (struct, inner address, inner versioned, defer,
# inner's deleter read when bridging, so a release reads no struct: 0.6 us less in pure Python,
# the data address it claims or 0)
_BRIDGES: dict[int, tuple[Any, int, bool, bool, Any, int]] = {}
#: data addresses claimed by live imports (see `rewrap`), without the compiled module
_CLAIMS: set[int] = set()


class AddressClaimed(DLPackError):
    """Another live import claims this tensor's data address (see `rewrap`)."""


def address_claimed(address: int) -> bool:
    """Whether a live import into a framework that files releases by address holds it."""
    if SPEEDUPS is not None:
        return bool(SPEEDUPS.address_claimed(address))
    return address in _CLAIMS


def claimed_addresses() -> int:
    """How many data addresses live imports claim (for leak tests)."""
    return int(SPEEDUPS.claimed_addresses()) if SPEEDUPS is not None else len(_CLAIMS)


def live_bridges() -> int:
    """How many bridged tensors are still held by a consumer (for leak tests)."""
    return len(_BRIDGES)


def _rewrap(
    capsule: object,
    inner: int,
    inner_versioned: bool,
    to_versioned: bool,
    version: tuple[int, int],
    flags: int,
    defer: bool = False,
    claim: bool = False,
) -> object:
    """A new managed tensor over `inner`'s tensor whose deleter releases `inner` once (with
    `defer`, just after, on the releasing thread: see `flush_deferred`); the old capsule is
    marked used. Its manager_ctx is set (to itself): some consumers (Paddle) call a deleter
    only when manager_ctx is not NULL. `claim`: see `rewrap`."""
    source = managed(inner, inner_versioned)
    claimed = (source.dl_tensor.data or 0) if claim else 0
    if claimed:
        if claimed in _CLAIMS:
            raise AddressClaimed(f"a live import claims the data address {claimed:#x}")
        _CLAIMS.add(claimed)
    outer: Any = dl.DLManagedTensorVersioned() if to_versioned else dl.DLManagedTensor()
    if to_versioned:
        outer.version.major, outer.version.minor = version
        outer.flags = flags
    outer.dl_tensor = source.dl_tensor
    address = ctypes.addressof(outer)
    outer.manager_ctx = address
    outer.deleter = _BRIDGE_DELETER
    if defer:
        _start_releaser()
    _BRIDGES[address] = (outer, inner, inner_versioned, defer, _callable(source.deleter), claimed)
    mark_used(capsule, inner_versioned)
    return new_capsule(address, to_versioned)


def deferring(claim: bool) -> Any:
    """The routes' deferring re-wrap (`rewrap(c, defer=True, claim=claim)`): a function giving
    the re-wrapped capsule, or None where a live import claims its address. With the
    accelerator, its own call: `rewrap`'s capsule check through ctypes costs 0.6 us."""
    if SPEEDUPS is not None:
        c_defer = SPEEDUPS.defer_release
        return lambda capsule: c_defer(capsule, claim)

    def defer(capsule: object) -> object | None:
        try:
            return rewrap(capsule, defer=True, claim=claim)
        except AddressClaimed:
            return None

    return defer


def bridge(
    capsule: object,
    *,
    to_versioned: bool,
    version: tuple[int, int] = dl.MAX_VERSION,
    read_only: bool = False,
    allow_read_only: bool = False,
) -> object:
    """Re-wrap a capsule's tensor in the other capsule kind; the old capsule is marked used.

    Going to a legacy capsule drops the READ_ONLY flag, so that is refused unless the caller
    says the consumer cannot write (`allow_read_only`). Going to a versioned capsule sets
    READ_ONLY when `read_only` is true.
    """
    inner, inner_versioned = pointer(capsule, not to_versioned)  # one C call when it must
    if inner_versioned == to_versioned:
        return capsule
    if inner_versioned:
        flags = managed(inner, True).flags
        if flags & dl.FLAG_READ_ONLY and not allow_read_only:
            raise ReadOnlyMemoryError(
                "the tensor is read-only and the consumer only takes legacy DLPack capsules, "
                "which cannot carry the READ_ONLY flag"
            )
    else:
        flags = dl.FLAG_READ_ONLY if read_only else 0
    return _rewrap(capsule, inner, inner_versioned, to_versioned, version, flags)


def rewrap(capsule: object, *, defer: bool = False, claim: bool = False) -> object:
    """The same tensor in a capsule of the same kind whose deleter and manager_ctx are set.

    DLPack lets producers leave both NULL, but some consumers then misbehave: JAX aborts the
    process when it frees an array imported with a NULL deleter, and Paddle calls a deleter
    only when manager_ctx is set (a leak). The new deleter releases the original exactly once.

    `claim` (with `defer`): the tensor's data address is claimed until the consumer releases
    it, for a consumer that files each import's release under that address (Paddle 3.3: a
    second import of an address drops the first's release). AddressClaimed, the capsule left
    as it is, where a live import claims it already.
    """
    if defer and SPEEDUPS is not None:  # released by a C thread: no GIL, no consumer's lock
        pointer(capsule)  # a typed error for anything but an unconsumed DLPack capsule
        fresh = SPEEDUPS.defer_release(capsule, claim)
        if fresh is None:
            raise AddressClaimed("a live import claims the tensor's data address")
        return fresh
    inner, versioned = pointer(capsule)
    mt = managed(inner, versioned)
    if versioned:
        version = (mt.version.major, mt.version.minor)
        return _rewrap(capsule, inner, True, True, version, mt.flags, defer, claim and defer)
    return _rewrap(capsule, inner, False, False, dl.MAX_VERSION, 0, defer, claim and defer)


def with_manager_ctx(capsule: object) -> object:
    """`capsule` itself if its manager_ctx is set, else the same tensor re-wrapped so it is."""
    inner, versioned = pointer(capsule)
    return capsule if managed(inner, versioned).manager_ctx else rewrap(capsule)


# DLTensor's data, device type and id (the first 16 bytes), and byte_offset (at 40).
_HEAD = struct.Struct("=QiiiBBHQQQ")


def where(capsule: object, versioned: bool) -> tuple[int, int, int]:
    """(device type code, device id, address of the first element) of an unconsumed capsule
    of a known kind, in three C calls: what the fast path checks after an export."""
    address = _get_pointer(capsule, dl.VERSIONED_NAME if versioned else dl.LEGACY_NAME)
    data, dev_type, dev_id, *_, offset = _HEAD.unpack(
        ctypes.string_at(address + (32 if versioned else 0), 48)
    )
    return dev_type, dev_id, data + offset


def retag(capsule: object, code: int, bits: int) -> None:
    """Rewrite the dtype of an unconsumed capsule's tensor in place (same element size).

    For frameworks whose own export or import mislabels a dtype they store correctly: MXNet
    tags its 1-byte booleans as 1-bit unsigned, NumPy can only hold bfloat16 as ml_dtypes.
    """
    address, versioned = pointer(capsule)
    dtype = managed(address, versioned).dl_tensor.dtype
    if (dtype.bits + 7) // 8 != (bits + 7) // 8:
        raise DLPackError(f"cannot retag {dtype.bits}-bit elements as {bits}-bit ones")
    dtype.code, dtype.bits = code, bits


# --- capsules over memory a Python object owns ------------------------------------------------
# The managed tensor, its shape and strides, and a reference to the owner live here until the
# consumer (or the unconsumed capsule) calls the deleter.
_OWNED: dict[int, tuple[Any, ...]] = {}
#: deleter calls for tensors already released (a double free, had the memory been C's)
stray_releases = 0


# Releases deferred out of a consumer's deleter (Paddle frees imports under a lock that its
# own exports' deleters take again), done by one daemon thread as soon as that lock is free.
_DEFERRED: queue.Queue[tuple[int, bool]] = queue.Queue()


def _release(
    address: int,
    bridges: dict[int, tuple[Any, int, bool, bool, Any, int]] = _BRIDGES,
    owned: dict[int, tuple[Any, ...]] = _OWNED,
    deferred: queue.Queue[tuple[int, bool]] = _DEFERRED,
    claims: set[int] = _CLAIMS,
) -> None:
    """The deleter of every managed tensor the core builds: a bridge or re-wrap releases the
    tensor it wraps, owned memory drops its owner (and says so to `on_release`).

    Its tables are bound here: at interpreter exit a tensor still held by a module cleared
    after this one is released once this module's globals are None."""
    global stray_releases
    bridged = bridges.pop(address, None)
    if bridged is not None:
        if bridged[5]:
            claims.discard(bridged[5])  # the consumer let go of the address
        if bridged[3]:
            deferred.put((bridged[1], bridged[2]))  # never blocks: the thread takes it
        elif bridged[4] is not None:
            bridged[4](bridged[1])
        return
    entry = owned.pop(address, None)
    if entry is None:
        stray_releases += 1
    elif entry[-1] is not None:
        entry[-1]()


_releaser: threading.Thread | None = None
_releaser_lock = threading.Lock()


def _release_deferred() -> None:
    while True:
        address, versioned = _DEFERRED.get()
        try:
            call_deleter(address, versioned)
        finally:
            _DEFERRED.task_done()


def _start_releaser() -> None:
    """Start the releasing thread (once), from ordinary code: never from inside a deleter,
    where the thread it waits for could block on the lock that deleter's caller holds."""
    global _releaser
    if _releaser is None:
        with _releaser_lock:
            if _releaser is None:
                _releaser = threading.Thread(
                    target=_release_deferred, name="interop-deferred-release", daemon=True
                )
                _releaser.start()


#: the queue's own deque: its truth, tested by the pure routes into Paddle, costs no call
pending_releases = _DEFERRED.queue


def drain_deferred() -> None:
    """Release what is queued, here and now (conversions call it, outside any consumer's
    lock): in a loop of conversions into Paddle the queue then never grows, whatever the
    releasing thread's share of the GIL. A backlog is memory: 5,000 MLX -> Paddle conversions
    kept 20 MB in MLX's allocator when only the thread released them."""
    if SPEEDUPS is not None:
        SPEEDUPS.drain_deferred()
    while pending_releases:
        try:
            address, versioned = _DEFERRED.get_nowait()
        except queue.Empty:  # the thread took the last one
            return
        try:
            call_deleter(address, versioned)
        finally:
            _DEFERRED.task_done()


def flush_deferred(timeout: float = 10.0) -> None:
    """Wait until every deferred release has run (what `Adapter.synchronize` waits for)."""
    _DEFERRED.join()
    if SPEEDUPS is not None:
        import time

        deadline = time.monotonic() + timeout
        while SPEEDUPS.deferred_pending() and time.monotonic() < deadline:
            time.sleep(0.001)


def _destroy(capsule: int) -> None:
    """An unconsumed capsule's destructor: release the tensor it still owns."""
    for name, versioned in ((dl.LEGACY_NAME, False), (dl.VERSIONED_NAME, True)):
        if _raw_is_valid(capsule, name):
            call_deleter(_raw_get_pointer(capsule, name), versioned)
            return


# Both run when a consumer frees a tensor, which can happen while an exception is being
# raised. The compiled trampolines save and restore that exception around the Python code;
# ctypes callbacks cannot (CPython then replaces the exception with a SystemError), so they
# serve only where the accelerator is not built.
if SPEEDUPS is not None:
    _DELETER, _DESTRUCTOR = SPEEDUPS.trampolines(_release)
    _keep: tuple[Any, ...] = ()
else:
    _keep = (dl.DELETER(_release), ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(_destroy))
    _DELETER, _DESTRUCTOR = (ctypes.cast(f, ctypes.c_void_p).value for f in _keep)
    # Never freed, not even when the interpreter clears this module at exit: a tensor still
    # held then by a module cleared later would call freed code (a segfault at exit)
    _incref = _bind("Py_IncRef", None, ctypes.py_object)
    for _callback in _keep:
        _incref(_callback)
_BRIDGE_DELETER = _OWNED_DELETER = _DELETER


def capsule_over(
    data: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: str,
    owner: object,
    *,
    device: tuple[str, int] = ("cpu", 0),
    read_only: bool = False,
    versioned: bool = True,
    version: tuple[int, int] = (1, 0),
    byte_offset: int = 0,
    on_release: Any = None,
) -> object:
    """A DLPack capsule describing memory that `owner` keeps alive (strides in elements).

    The owner stays referenced until the tensor is released, exactly once, through the
    deleter; `on_release()` is then called. For producers whose own DLPack export cannot
    describe some memory (NumPy before 2.1 refuses read-only arrays) and for tests.
    """
    code, bits = dl.DTYPE_CODES[dtype]
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    mt: Any = dl.DLManagedTensorVersioned() if versioned else dl.DLManagedTensor()
    if versioned:
        mt.version.major, mt.version.minor = version
        mt.flags = dl.FLAG_READ_ONLY if read_only else 0
    t = mt.dl_tensor
    t.data = data
    t.device.device_type, t.device.device_id = dl.DEVICE_CODES[device[0]], device[1]
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = byte_offset
    mt.deleter = _OWNED_DELETER
    address = ctypes.addressof(mt)
    _OWNED[address] = (mt, shape_arr, strides_arr, owner, on_release)
    return new_capsule(address, versioned)
