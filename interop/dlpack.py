"""DLPack's C ABI (v1.0 to v1.3) as ctypes structures, plus dtype and device names.

Only data lives here: the layouts of the structs, the enum codes and the flags, so that every
other module speaks DLPack through one definition.
"""

from __future__ import annotations

import ctypes
import struct
from functools import lru_cache

#: The newest DLPack version this core reads and writes.
MAX_VERSION: tuple[int, int] = (1, 3)
#: The only major version whose ABI the core knows.
MAJOR_VERSION = 1

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

LEGACY_NAME = b"dltensor"
VERSIONED_NAME = b"dltensor_versioned"
USED_LEGACY_NAME = b"used_dltensor"
USED_VERSIONED_NAME = b"used_dltensor_versioned"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# The same structs as bytes, for code that reads or writes one in a single C call (ctypes'
# field-by-field access costs several times more).
#: DLTensor: data, device type, device id, ndim, dtype code, bits, lanes, shape, strides, offset
TENSOR_BYTES = struct.Struct("=QiiiBBHQQQ")
#: DLManagedTensorVersioned: version major, minor, manager_ctx, deleter, flags, then a DLTensor
VERSIONED_BYTES = struct.Struct("=IIQQQ" + TENSOR_BYTES.format[1:])
#: DLManagedTensor: a DLTensor, then manager_ctx and deleter
LEGACY_BYTES = struct.Struct(TENSOR_BYTES.format + "QQ")
#: where the DLTensor starts in each: versioned, legacy
TENSOR_AT = {True: VERSIONED_BYTES.size - TENSOR_BYTES.size, False: 0}


# --- devices ---------------------------------------------------------------------------------
DEVICE_NAMES: dict[int, str] = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    11: "rocm_host",
    12: "ext_dev",
    13: "cuda_managed",
    14: "oneapi",
    15: "webgpu",
    16: "hexagon",
    17: "maia",
    18: "trn",
}
DEVICE_CODES: dict[str, int] = {name: code for code, name in DEVICE_NAMES.items()}
#: Devices whose producers order work on a stream handed to `__dlpack__(stream=...)`.
STREAM_DEVICES = frozenset({"cuda", "cuda_managed", "rocm"})


def device_name(code: int) -> str:
    return DEVICE_NAMES.get(code, f"device{code}")


# --- dtypes ----------------------------------------------------------------------------------
_CODE_KIND = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}
_FLOAT_LOW_PRECISION = {
    7: "float8_e3m4",
    8: "float8_e4m3",
    9: "float8_e4m3b11fnuz",
    10: "float8_e4m3fn",
    11: "float8_e4m3fnuz",
    12: "float8_e5m2",
    13: "float8_e5m2fnuz",
    14: "float8_e8m0fnu",
    15: "float6_e2m3fn",
    16: "float6_e3m2fn",
    17: "float4_e2m1fn",
}
_LOW_PRECISION_BITS = {code: int(name[5]) for code, name in _FLOAT_LOW_PRECISION.items()}


@lru_cache(maxsize=512)
def dtype_name(code: int, bits: int, lanes: int = 1) -> str:
    """Name a DLPack dtype the way NumPy and ml_dtypes do ("float32", "bfloat16", "bool")."""
    if code in _FLOAT_LOW_PRECISION and bits == _LOW_PRECISION_BITS[code]:
        name = _FLOAT_LOW_PRECISION[code]
    elif code == 6 and bits == 8:
        name = "bool"
    elif code in _CODE_KIND:
        name = f"{_CODE_KIND[code]}{bits}"
    else:
        name = f"code{code}_bits{bits}"
    return name if lanes == 1 else f"{name}x{lanes}"


def _build_dtype_codes() -> dict[str, tuple[int, int]]:
    codes: dict[str, tuple[int, int]] = {"bool": (6, 8), "bfloat16": (4, 16)}
    for bits in (4, 8, 16, 32, 64):
        codes[f"int{bits}"] = (0, bits)
        codes[f"uint{bits}"] = (1, bits)
    for bits in (16, 32, 64):
        codes[f"float{bits}"] = (2, bits)
    for bits in (64, 128):
        codes[f"complex{bits}"] = (5, bits)
    for code, name in _FLOAT_LOW_PRECISION.items():
        codes[name] = (code, _LOW_PRECISION_BITS[code])
    return codes


#: Every dtype name the core knows, mapped to its DLPack (code, bits).
DTYPE_CODES: dict[str, tuple[int, int]] = _build_dtype_codes()


def dtype_bytes(name: str) -> int:
    """Bytes per element of a named dtype (sub-byte dtypes count as one)."""
    return (DTYPE_CODES.get(name, (0, 8))[1] + 7) // 8


def dtype_bits(name: str) -> int:
    """Bits per element of a named dtype (lanes of one)."""
    try:
        return DTYPE_CODES[name][1]
    except KeyError:
        raise ValueError(f"unknown dtype name {name!r}") from None
