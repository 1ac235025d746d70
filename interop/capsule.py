"""Reading, creating and bridging DLPack capsules through CPython's capsule API.

MXNet rebinds `ctypes.pythonapi.PyCapsule_*` prototypes globally when imported, so every call
here goes through private prototypes bound once in this module. Memory ownership follows the
Python DLPack spec: a consumer renames the capsule it takes to ``used_dltensor[_versioned]``
and from then on owns the deleter; an unconsumed capsule calls the deleter when it dies.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import os
import struct
from collections.abc import Callable
from typing import Any

from . import dlpack as dl
from .errors import DLPackError, ReadOnlyMemoryError, typed
from .releases import Releases, choose
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
#: `size` bytes at an address, as bytes (ctypes.string_at's own call, without its frame)
_read = _bind("PyBytes_FromStringAndSize", ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)
_decref = _bind("Py_DecRef", None, ctypes.py_object)


def is_capsule(obj: object) -> bool:
    return type(obj) is CapsuleType


def held_pointer(capsule: object) -> int:
    """The pointer any capsule holds, whatever its name (NumPy's C API table, for one)."""
    return int(_get_pointer(capsule, _get_name(capsule)) or 0)


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
        # also what torch's (RuntimeError) and Paddle's (ValueError) from_dlpack raise for it
        raise typed(DLPackError, RuntimeError, ValueError)(
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


def release_unconsumed(capsule: object) -> None:
    """Release the tensor of a capsule no consumer took, once (a taken one is its consumer's):
    for capsules made without a destructor (`Adapter.bare_exporter`), which nothing else
    would release. Marked used first, so a destructor it may have leaves it alone."""
    name = capsule_name(capsule)
    if name == dl.LEGACY_NAME or name == dl.VERSIONED_NAME:
        versioned = name == dl.VERSIONED_NAME
        address = _get_pointer(capsule, name)
        mark_used(capsule, versioned)
        call_deleter(address, versioned)


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
    producer's own, which releases an unconsumed tensor just as the core's would); 0 for
    none, where the caller releases it if no consumer takes it (`release_unconsumed`)."""
    name = dl.VERSIONED_NAME if versioned else dl.LEGACY_NAME
    return _new(address, name, _DESTRUCTOR if destructor is None else destructor)


# --- bridging between the two capsule kinds ----------------------------------------------------
# A box (the managed tensor the core makes over another's DLTensor) lives in RELEASES.bridges
# until its consumer calls its deleter; that deleter then releases the producer's managed
# tensor exactly once (its deleter is read as a callable when boxing: a release reads no struct)
_VERSIONED_HEAD = struct.Struct("=IIQQQ")  # version, manager_ctx, deleter, flags
_LEGACY_TAIL = struct.Struct("=QQ")  # manager_ctx, deleter
_WORD = struct.Struct("=Q")
_BOXES = {
    True: ctypes.c_char * dl.VERSIONED_BYTES.size,
    False: ctypes.c_char * dl.LEGACY_BYTES.size,
}


class AddressClaimed(DLPackError):
    """Another live import claims this tensor's data address (see `rewrap`)."""


def address_claimed(address: int) -> bool:
    """Whether a live import into a framework that files releases by address holds it."""
    return RELEASES.address_claimed(address)


def claimed_addresses() -> int:
    """How many data addresses live imports claim (for leak tests)."""
    return RELEASES.claimed_addresses()


def live_bridges() -> int:
    """How many bridged tensors are still held by a consumer (for leak tests)."""
    return len(RELEASES.bridges)


def _box(
    inner: int,
    inner_versioned: bool,
    to_versioned: bool,
    version: tuple[int, int] | None,
    flags: int | None,
    defer: bool = False,
    claim: bool = False,
) -> int:
    """The address of a new managed tensor over `inner`'s DLTensor whose deleter releases
    `inner` once (with `defer`, just after, on the releasing thread: see `flush_deferred`).

    `version` and `flags` of a versioned box: None takes the inner tensor's (or DLPack's
    newest and none, from a legacy one). Its manager_ctx is `inner`: some consumers (Paddle)
    call a deleter only when manager_ctx is not NULL. Built as bytes in one copy: ctypes'
    field-by-field writes cost 2 us more. `claim`: see `rewrap` (AddressClaimed)."""
    raw = _read(inner, dl.VERSIONED_BYTES.size if inner_versioned else dl.LEGACY_BYTES.size)
    if inner_versioned:
        major, minor, _, deleter, inner_flags = _VERSIONED_HEAD.unpack_from(raw)
        tensor = raw[dl.TENSOR_AT[True] :]
    else:
        major, minor, inner_flags = (*dl.MAX_VERSION, 0)
        deleter = _WORD.unpack_from(raw, dl.LEGACY_BYTES.size - 8)[0]
        tensor = raw[: dl.TENSOR_BYTES.size]
    if to_versioned:
        major, minor = version or (major, minor)
        head = _VERSIONED_HEAD.pack(
            major, minor, inner, _BRIDGE_DELETER, inner_flags if flags is None else flags
        )
        box = _BOXES[True].from_buffer_copy(head + tensor)
    else:
        box = _BOXES[False].from_buffer_copy(tensor + _LEGACY_TAIL.pack(inner, _BRIDGE_DELETER))
    address = ctypes.addressof(box)
    claimed = _WORD.unpack_from(tensor)[0] if claim else 0
    if claimed and not RELEASES.claim(claimed, address):
        raise AddressClaimed(f"a live import claims the data address {claimed:#x}")
    if defer:
        RELEASES.start()
    RELEASES.bridges[address] = (box, inner, _callable(deleter), defer, claimed)
    return address


def _rewrap(capsule: object, inner_versioned: bool, box: int, to_versioned: bool) -> object:
    """The `box` made of `capsule`'s tensor in a fresh capsule; `capsule` is marked used."""
    mark_used(capsule, inner_versioned)
    return new_capsule(box, to_versioned)


def deferring(claim: bool) -> Any:
    """The routes' deferring re-wrap (`rewrap(c, defer=True, claim=claim)`): a function giving
    the re-wrapped capsule, or None where a live import claims its address. With the
    accelerator, its own call: `rewrap`'s capsule check through ctypes costs 0.6 us."""
    defer_rewrap = RELEASES.defer_rewrap
    return lambda capsule: defer_rewrap(capsule, claim)


# --- the DLPack C exchange API's import, through ctypes ------------------------------------
_API_HEAD = struct.Struct("=IIQQQQ")  # version, prev_api, allocator, from_py, to_py
_TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def exchange_import(kind: type) -> Callable[[int], Any] | None:
    """`kind.__dlpack_c_exchange_api__`'s import (DLPack 1.3), or None where it has none: a
    function making a `kind` tensor of the versioned managed tensor at an address, which the
    framework owns from then on, even when the call fails (DLPackError)."""
    holder = getattr(kind, "__dlpack_c_exchange_api__", None)
    if type(holder) is not CapsuleType:
        return None
    try:
        api = _get_pointer(holder, b"dlpack_exchange_api")
    except ValueError:
        return None
    major, _, _, _, _, to_py = _API_HEAD.unpack(_read(api, _API_HEAD.size))
    if major != 1 or not to_py:
        return None
    call = _TO_PY(to_py)
    py_object, addressof, decref = ctypes.py_object, ctypes.addressof, _decref
    name = f"{kind.__module__}.{kind.__qualname__}"

    def import_(address: int, _holder: object = holder) -> Any:
        out = py_object()
        if call(address, addressof(out)) != 0 or not out:
            raise DLPackError(f"{name}'s DLPack exchange import failed")
        made = out.value  # a second reference: the framework handed us one
        decref(made)
        return made

    return import_


def deferring_import(
    claim: bool, versioned: bool, import_: Callable[[int], Any]
) -> Callable[[object], Any]:
    """The pure routes' re-wrap and import in one, into a framework whose exchange API imports
    (Paddle's): the capsule's tensor boxed as versioned with its release deferred (and its data
    address claimed), given to `import_` as it is: none of the framework's Python import (3.6
    of Paddle's 6.5 us); an adapter's box where it makes one (`Boxes.defer`). None where a live
    import claims the address (the capsule is left as it is); a capsule of the other kind
    raises ValueError."""
    name = dl.VERSIONED_NAME if versioned else dl.LEGACY_NAME
    box, get_pointer, mark, boxes = _box, _get_pointer, _set_name, RELEASES.boxes
    used = dl.USED_VERSIONED_NAME if versioned else dl.USED_LEGACY_NAME

    def adopt(capsule: object) -> Any:
        inner = get_pointer(capsule, name)
        keep = boxes()
        kept = keep.defer(capsule, inner, versioned, claim) if keep else NotImplemented
        if kept is None:
            return None
        if kept is NotImplemented:
            try:
                address = box(inner, versioned, True, None, None, True, claim)
            except AddressClaimed:
                return None
            mark(capsule, used)
        else:
            address = get_pointer(kept, dl.VERSIONED_NAME)
            mark(kept, dl.USED_VERSIONED_NAME)
        return import_(address)

    return adopt


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
    READ_ONLY when `read_only` is true; its version is at most `version` (NumPy's bridges
    are 1.0: see `_numpy_bridge`).
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
    boxes = RELEASES.boxes() if RELEASES.python_callbacks else None
    if boxes is not None:  # (releases in C, not through a ctypes callback: see `Boxes`)
        boxed = boxes.bridge(capsule, inner, inner_versioned, flags)
        if boxed is not None:
            return boxed
    box = _box(inner, inner_versioned, to_versioned, version, flags)
    return _rewrap(capsule, inner_versioned, box, to_versioned)


class Held:
    """A capsule behind `__dlpack__`, for consumers that take objects only (NumPy here; the
    fast path's importers, whose plan chose the capsule's kind already)."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule: Any, device: tuple[int, int] = (1, 0)) -> None:
        self.capsule = capsule
        self.device = device

    def __dlpack__(
        self,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: Any = None,
        **_: Any,
    ) -> Any:
        """The capsule, once. The keywords consumers pass are named: a `**` that catches them
        all builds a dict per call, 0.2 us of NumPy's 0.6 us import (measured)."""
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


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
    if defer:  # the runtime's: the compiled one releases on a C thread, with no GIL
        pointer(capsule)  # a typed error for anything but an unconsumed DLPack capsule
        fresh = RELEASES.defer_rewrap(capsule, claim)
        if fresh is None:
            raise AddressClaimed("a live import claims the tensor's data address")
        return fresh
    inner, versioned = pointer(capsule)
    box = _box(inner, versioned, versioned, None, None)
    return _rewrap(capsule, versioned, box, versioned)


def gil_first(capsule: object) -> object:
    """`capsule` over the memory of a framework that frees imports under a lock of its own
    (Paddle), for the pure runtime: the same tensor in a capsule NumPy makes, whose release
    takes the GIL before that framework's deleter runs. Paddle's import waits for that lock
    holding the GIL, and its deleter runs the deleters of memory it imported, which in this
    runtime all take the GIL: a consumer freeing Paddle's own capsule without the GIL (MXNet
    does, and torch) then deadlocks with it. `capsule` itself where NumPy cannot take it."""
    boxes = RELEASES.boxes()
    if boxes is None:
        return capsule
    inner, versioned = pointer(capsule)
    flags = _VERSIONED_HEAD.unpack(_read(inner, _VERSIONED_HEAD.size))[4] if versioned else 0
    return boxes.again(capsule, inner, versioned, flags) or capsule


def gil_first_between(source: Any, target: Any, target_boxes: bool) -> bool:
    """Whether capsules out of adapter `source` go to adapter `target` through `gil_first`:
    in the pure runtime, out of a framework that frees imports under a lock of its own
    (`Capabilities.frees_under_lock`), into another, but one declaring `CapsuleBoxes`
    (`target_boxes`, NumPy): its own import is that box."""
    return (
        RELEASES.python_callbacks
        and source is not target
        and not target_boxes
        and source.capabilities().frees_under_lock
    )


def _defer_rewrap(capsule: object, claim: bool) -> object | None:
    """The pure runtime's deferring re-wrap: an adapter's box where it can make one (NumPy's),
    else the core's; None where a live import claims the data address (the capsule left as it
    was)."""
    inner, versioned = pointer(capsule)
    boxes = RELEASES.boxes()
    kept = boxes.defer(capsule, inner, versioned, claim) if boxes else NotImplemented
    if kept is not NotImplemented:
        return kept
    try:
        box = _box(inner, versioned, versioned, None, None, True, claim)
    except AddressClaimed:
        return None
    return _rewrap(capsule, versioned, box, versioned)


def with_manager_ctx(capsule: object) -> object:
    """`capsule` itself if its manager_ctx is set, else the same tensor re-wrapped so it is."""
    inner, versioned = pointer(capsule)
    return capsule if managed(inner, versioned).manager_ctx else rewrap(capsule)


def where(capsule: object, versioned: bool) -> tuple[int, int, int]:
    """(device type code, device id, address of the first element) of an unconsumed capsule
    of a known kind, in two C calls: what the fast path checks after an export."""
    address = _get_pointer(capsule, dl.VERSIONED_NAME if versioned else dl.LEGACY_NAME)
    data, dev_type, dev_id, *_, offset = dl.TENSOR_BYTES.unpack(
        _read(address + dl.TENSOR_AT[versioned], dl.TENSOR_BYTES.size)
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


def drain_deferred() -> None:
    """Release what is queued for the releasing thread, here and now (conversions call it,
    outside any consumer's lock): see `Releases.drain`."""
    RELEASES.drain()


def flush_deferred(timeout: float = 10.0) -> None:
    """Wait until every deferred release has run (what `Adapter.synchronize` waits for)."""
    RELEASES.flush(timeout)


def _destroy(capsule: int) -> None:
    """An unconsumed capsule's destructor: release the tensor it still owns."""
    for name, versioned in ((dl.LEGACY_NAME, False), (dl.VERSIONED_NAME, True)):
        if _raw_is_valid(capsule, name):
            call_deleter(_raw_get_pointer(capsule, name), versioned)
            return


# Both run when a consumer frees a tensor, which can happen while an exception is being
# raised. The compiled trampolines save and restore that exception around the Python code;
# ctypes callbacks cannot (CPython then replaces the exception with a SystemError, and the
# release is lost), so they serve only where the accelerator is not built, and there only
# where no adapter makes the box (`Releases.boxes`; NumPy's: a tensor NumPy does not take, not
# on the CPU or of a dtype it lacks), and for a re-wrap that is not deferred.
#: the one runtime behind every release, claim and deferred queue: compiled or pure, chosen once
RELEASES: Releases = choose(SPEEDUPS, _defer_rewrap)
_DELETER, _DESTRUCTOR, _keep = RELEASES.trampolines(_destroy)
_BRIDGE_DELETER = _OWNED_DELETER = _DELETER
atexit.register(RELEASES.stop)
if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=RELEASES.after_fork)


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
    RELEASES.owned[address] = (mt, shape_arr, strides_arr, owner, on_release)
    return new_capsule(address, versioned)
