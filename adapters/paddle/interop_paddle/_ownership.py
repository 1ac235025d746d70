"""Give Paddle capsules whose deleter it will call.

Paddle 3.3 calls a DLPack producer's deleter only when `manager_ctx` is not NULL (measured:
a capsule with a NULL `manager_ctx` is never released, whatever its kind). The DLPack
standard lets producers leave `manager_ctx` NULL, and their deleters may rely on it staying
so, so it is never written here. Such a tensor is re-wrapped instead: a managed tensor of our
own, with a non-NULL `manager_ctx`, whose deleter releases the producer's exactly once.

Only ctypes and the DLPack ABI are used; the CPython capsule functions are bound privately,
because MXNet rewrites the shared `ctypes.pythonapi` prototypes when it is imported.
"""

from __future__ import annotations

import ctypes
from typing import Any


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Legacy(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _Tensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


# Capsule names must outlive the capsules that point at them: module constants.
_NAMES = {True: b"dltensor_versioned", False: b"dltensor"}
_USED = {True: b"used_dltensor_versioned", False: b"used_dltensor"}

_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api)
)
_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api)
)
# The capsule destructor receives a bare PyObject* (its refcount already zero).
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)

_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

#: our managed tensors still held by Paddle (or by an unconsumed capsule), by address
_LIVE: dict[int, tuple[Any, int, int]] = {}


@_DELETER
def _release(address: int) -> None:
    """Our deleter: release the producer's managed tensor, once."""
    entry = _LIVE.pop(address, None)
    if entry is not None:
        _, inner, inner_deleter = entry
        if inner_deleter:
            _DELETER(inner_deleter)(inner)


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _destructor(capsule: int) -> None:
    """An unconsumed wrapper capsule was dropped: release its tensor as its owner would."""
    for versioned in (True, False):
        if _raw_is_valid(capsule, _NAMES[versioned]):
            _release(_raw_get_pointer(capsule, _NAMES[versioned]))
            return


_RELEASE = ctypes.cast(_release, ctypes.c_void_p).value
_DESTRUCTOR = ctypes.cast(_destructor, ctypes.c_void_p).value


def live() -> int:
    """How many re-wrapped tensors are not released yet (for leak tests)."""
    return len(_LIVE)


def owned_by_paddle(capsule: object) -> object:
    """`capsule`, or a replacement whose deleter Paddle calls; the original is marked used."""
    for versioned in (True, False):
        if _is_valid(capsule, _NAMES[versioned]):
            break
    else:
        return capsule  # used, or not a DLPack capsule: Paddle says so itself
    address = _get_pointer(capsule, _NAMES[versioned])
    kind = _Versioned if versioned else _Legacy
    inner = kind.from_address(address)
    if inner.manager_ctx:
        return capsule
    outer = kind()
    if versioned:
        outer.version = inner.version
        outer.flags = inner.flags
    outer.dl_tensor = inner.dl_tensor
    outer_address = ctypes.addressof(outer)
    outer.manager_ctx = outer_address  # any non-NULL value makes Paddle call the deleter
    outer.deleter = _RELEASE
    _LIVE[outer_address] = (outer, address, inner.deleter or 0)
    _set_name(capsule, _USED[versioned])
    return _new(outer_address, _NAMES[versioned], _DESTRUCTOR)
