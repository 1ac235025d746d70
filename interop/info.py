"""What a tensor is, read from its DLPack description: shape, strides, dtype, device, layout."""

from __future__ import annotations

import ctypes
import math
import platform
import struct
from collections.abc import Callable
from functools import cache, lru_cache
from typing import NamedTuple

from . import capsule as cap
from . import dlpack as dl
from .errors import DLPackError


class Device(NamedTuple):
    """A DLPack device: its type name ("cpu", "cuda", ...) and ordinal."""

    #: DLPack's device type name: "cpu", "cuda", "cuda_host", "rocm", "metal", ...
    type: str
    #: the device's ordinal within its type
    id: int = 0

    @property
    def code(self) -> int:
        """DLPack's device type code (1 for "cpu", 2 for "cuda", ...); -1 for a name it lacks."""
        return dl.DEVICE_CODES.get(self.type, -1)

    def __str__(self) -> str:
        return self.type if self.type == "cpu" and not self.id else f"{self.type}:{self.id}"


CPU = Device("cpu", 0)

# Layout classes, from most to least restrictive for an importer.
CANONICAL = "canonical"  # exactly row-major compact strides (what NULL strides mean)
CONTIGUOUS = "contiguous"  # row-major compact, odd strides only on size-1 dims (or no elements)
PERMUTED = "permuted"  # a dense transpose of a compact buffer
STRIDED = "strided"  # positive strides with gaps (step slices)
BROADCAST = "broadcast"  # a stride of 0 on a dimension longer than 1
NEGATIVE = "negative"  # a negative stride (reversed views)
LAYOUTS = (CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST, NEGATIVE)


def compact_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements: what DLPack's NULL strides stand for."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


@lru_cache(maxsize=1024)
def canonical_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`compact_strides`, remembered per shape: what an adapter's `fingerprint` compares a
    tensor's strides with where an extent-1 dimension leaves them free (a batch of one)."""
    return compact_strides(shape)


@lru_cache(maxsize=4096)
def classify_layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """The layout class of a strided view, as importers care about it."""
    canonical = compact_strides(shape)
    if strides == canonical:
        return CANONICAL
    if 0 in shape:  # no elements: any strides describe the same (empty) memory
        return CONTIGUOUS
    pairs = zip(shape, strides, strict=True)
    long_dims = [(extent, stride) for extent, stride in pairs if extent != 1]
    if any(stride < 0 for _, stride in long_dims):
        return NEGATIVE
    if any(stride == 0 for extent, stride in long_dims if extent > 1):
        return BROADCAST
    dims = zip(strides, canonical, shape, strict=True)
    if all(s == c for s, c, e in dims if e != 1):
        return CONTIGUOUS
    step = 1
    for extent, stride in sorted(long_dims, key=lambda es: es[1]):
        if stride != step:
            return STRIDED
        step *= extent
    return PERMUTED


class TensorInfo(NamedTuple):
    """A tensor as DLPack describes it (strides in elements, never None)."""

    #: one extent per dimension
    shape: tuple[int, ...]
    #: in elements, one per dimension (DLPack's NULL strides given as row-major ones)
    strides: tuple[int, ...]
    #: DLPack's dtype name ("float32", "bfloat16", "bool", ...)
    dtype: str
    #: where the memory lives
    device: Device
    #: bytes from `data` to the first element
    byte_offset: int
    #: the memory may not be written: DLPack's READ_ONLY flag (versioned capsules only), or
    #: a framework whose tensors are immutable by API (JAX, TensorFlow)
    read_only: bool
    #: the capsule's DLPack version; None: a legacy (unversioned) capsule
    version: tuple[int, int] | None
    #: DLTensor.data; the first element is at data + byte_offset
    data: int
    #: the adapter whose tensor was described, when one was
    framework: str | None = None
    #: the capsule's deleter and manager_ctx are set (DLPack allows NULL for both)
    deleter: bool = True
    manager_ctx: bool = True

    @property
    def alignment(self) -> int:
        """The largest power of two (at most 64) dividing the first element's address."""
        address = self.address
        return min(address & -address, 64) if address else 64

    @property
    def itemsize(self) -> int:
        return dl.dtype_bytes(self.dtype)

    def span(self) -> tuple[int, int]:
        """(lowest address, byte count up to one past the highest) of the memory addressed."""
        if not self.size:
            return self.address, 0
        pairs = list(zip(self.shape, self.strides, strict=True))
        low = sum(stride * (n - 1) for n, stride in pairs if stride < 0)
        high = sum(stride * (n - 1) for n, stride in pairs if stride > 0)
        item = max(self.itemsize, 1)
        return self.address + low * item, (high - low + 1) * item

    @property
    def address(self) -> int:
        """Address of the first element."""
        return self.data + self.byte_offset

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def layout(self) -> str:
        return classify_layout(self.shape, self.strides)

    def __str__(self) -> str:
        version = "legacy" if self.version is None else "{}.{}".format(*self.version)
        ro = ", read-only" if self.read_only else ""
        return (
            f"{self.framework or 'DLPack'} tensor {self.dtype}{list(self.shape)} on {self.device}, "
            f"strides {list(self.strides)} ({self.layout}){ro}, DLPack {version}, "
            f"data 0x{self.data:x}+{self.byte_offset}"
        )


_VERSIONED, _LEGACY = dl.VERSIONED_BYTES, dl.LEGACY_BYTES
_string_at = ctypes.string_at
if ctypes.sizeof(dl.DLTensor) != dl.TENSOR_BYTES.size:  # pragma: no cover - 32-bit platforms
    raise ImportError("interop reads DLPack structs with 64-bit pointers only")


#: One past the highest user-space address a pointer of this process can hold: x86-64 (and
#: other 4-level-paging platforms) ends below 2**47, aarch64 may use up to 52-bit addresses;
#: elsewhere only the 64-bit pointer width bounds it. A CPU tensor reaching beyond it was
#: described wrongly, and reading it would crash inside whoever copies it.
_ADDRESS_LIMITS = {"x86_64": 1 << 47, "amd64": 1 << 47, "aarch64": 1 << 52, "arm64": 1 << 52}
USER_ADDRESS_LIMIT = _ADDRESS_LIMITS.get(platform.machine().lower(), 1 << 64)
#: Devices whose pointers are host virtual addresses (the others' may be opaque handles).
_HOST_ADDRESSED = frozenset({dl.DEVICE_CODES.get(n, -1) for n in ("cpu", "cuda_host", "rocm_host")})


def _check_bytes_addressed(
    data: int,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    width: int,
    dev_type: int,
    framework: str | None,
) -> None:
    """Refuse a tensor whose first or last addressed byte lies outside any address space."""
    dims = list(zip(shape, strides, strict=True))
    low = sum(stride * (n - 1) for n, stride in dims if stride < 0) * width
    high = sum(stride * (n - 1) for n, stride in dims if stride > 0) * width + width
    limit = USER_ADDRESS_LIMIT if dev_type in _HOST_ADDRESSED else 1 << 64
    first, end = data + offset + low, data + offset + high
    if first < 0 or end > limit:
        raise DLPackError(
            f"the DLPack tensor addresses bytes 0x{first:x} to 0x{end:x} (data 0x{data:x}, "
            f"byte_offset {offset}, shape {list(shape)}, strides {list(strides)}), outside "
            f"any memory this process can hold (below 0x{limit:x}): the producer "
            f"({framework or 'unknown'}) described it wrongly; ask it for a fresh export"
        )


@cache
def _int64_reader(count: int) -> Callable[[bytes], tuple[int, ...]]:
    return struct.Struct(f"={count}q").unpack


def _int64s(shape_p: int, strides_p: int, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides, in one read when they lie within a page of each other (both ends
    are valid memory, so every byte between them is mapped), else in two."""
    size = 8 * ndim
    if not strides_p:
        shape = _int64_reader(ndim)(_string_at(shape_p, size))
        return shape, compact_strides(shape)
    gap = strides_p - shape_p
    if gap % 8 == 0 and abs(gap) < 4096 - size:
        low, skip = (shape_p, gap // 8) if gap >= 0 else (strides_p, -gap // 8)
        values = _int64_reader(skip + ndim)(_string_at(low, 8 * skip + size))
        first, second = values[:ndim], values[skip:]
        return (first, second) if gap >= 0 else (second, first)
    read = _int64_reader(ndim)
    return read(_string_at(shape_p, size)), read(_string_at(strides_p, size))


def read_capsule(
    capsule: object, framework: str | None = None, expect_versioned: bool | None = None
) -> TensorInfo:
    """Describe the tensor in an unconsumed DLPack capsule without taking it.

    One read of the struct's bytes and one of its shape and strides: field-by-field ctypes
    access costs several times more, and this runs on every conversion.
    """
    address, versioned = cap.pointer(capsule, expect_versioned)
    if not address:
        raise DLPackError("the DLPack capsule holds a NULL managed tensor")
    version = None
    read_only = False
    if versioned:
        head = _VERSIONED.unpack(_string_at(address, 80))
        major, minor, _, _, flags = head[:5]
        version = (major, minor)
        if major != dl.MAJOR_VERSION:
            raise DLPackError(
                f"DLPack version {major}.{minor} is not supported: this core reads major "
                f"version {dl.MAJOR_VERSION} (1.0 to {dl.MAX_VERSION[0]}.{dl.MAX_VERSION[1]})"
            )
        read_only = bool(flags & dl.FLAG_READ_ONLY)
        manager_ctx, deleter = head[2:4]
        fields = head[5:]
    else:
        *legacy, manager_ctx, deleter = _LEGACY.unpack(_string_at(address, 64))
        fields = tuple(legacy)
    data, dev_type, dev_id, ndim, code, bits, lanes, shape_p, strides_p, offset = fields
    if not bits or not lanes:
        raise DLPackError(
            f"the DLPack tensor has an invalid dtype (code {code}, {bits} bits, {lanes} lanes)"
        )
    if ndim < 0 or ndim > 64:
        raise DLPackError(f"the DLPack tensor has an invalid ndim ({ndim})")
    if ndim:
        if not shape_p:
            raise DLPackError("the DLPack tensor has ndim > 0 but a NULL shape")
        shape, strides = _int64s(shape_p, strides_p, ndim)
        if min(shape) < 0:
            raise DLPackError(f"the DLPack tensor has a negative extent in its shape {list(shape)}")
        if 0 not in shape:
            width = max(bits * lanes, 8) // 8
            if math.prod(shape) * width >= 1 << 62:
                raise DLPackError(f"the DLPack tensor's shape {list(shape)} is impossibly large")
            # CuPy 14 writes negative strides of wide dtypes as huge positive ones: importers
            # then abort on the overflow (torch) or read far outside the buffer
            dims = zip(shape, strides, strict=True)
            span = sum(abs(stride) * (extent - 1) for extent, stride in dims)
            if span * width >= 1 << 62:
                raise DLPackError(
                    f"the DLPack tensor's strides {list(strides)} (shape {list(shape)}) reach "
                    f"beyond any memory: the producer ({framework or 'unknown'}) described "
                    "them wrongly"
                )
            _check_bytes_addressed(data, offset, shape, strides, width, dev_type, framework)
    else:
        shape = strides = ()
        _check_bytes_addressed(data, offset, (), (), max(bits * lanes, 8) // 8, dev_type, framework)
    if not data and 0 not in shape:
        raise DLPackError(
            f"the DLPack tensor has elements (shape {list(shape)}) but a NULL data pointer: "
            "its memory was freed or never allocated (torch: a storage resized to 0, as FSDP "
            "does with sharded parameters); convert it while its memory is allocated"
        )
    return TensorInfo(
        shape,
        strides,
        dl.dtype_name(code, bits, lanes),
        _device(dev_type, dev_id),
        offset,
        read_only,
        version,
        data,
        framework,
        bool(deleter),
        bool(manager_ctx),
    )


@lru_cache(maxsize=256)
def _device(code: int, index: int) -> Device:
    return Device(dl.device_name(code), index)
