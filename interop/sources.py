"""Tensors that do not speak DLPack, made into DLPack producers the core handles like any other.

Four kinds of source are recognised by attribute and type checks only (no framework import):
the Python buffer protocol (`memoryview`, `bytearray`, `bytes`, `array.array`, `mmap`, ctypes
arrays, and any `__buffer__` type from Python 3.12), `__array_interface__` v3 (PIL images,
NumPy scalars, C extensions), `__cuda_array_interface__` v3 (Numba, PyCUDA, older CuPy) and
Arrow arrays (pyarrow, fixed-width numbers without nulls) and Arrow buffers (their bytes).
Memory is always shared, never copied here: each `__dlpack__` call wraps it in a fresh capsule
(`capsule.capsule_over`) whose owner keeps the source alive until the consumer releases it,
once. Read-only memory (bytes, read-only buffers and interfaces, Arrow arrays and buffers) is
flagged READ_ONLY in versioned capsules and refused as a legacy capsule, which cannot say so;
the planner then copies for consumers that could write it, or `copy=False` raises.
"""

from __future__ import annotations

import array
import ctypes
import mmap
import operator
import sys
from collections.abc import Callable, Mapping
from typing import Any

from . import capsule as cap
from . import dlpack as dl
from .errors import (
    DeviceError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
    UnsupportedTensorError,
    typed,
)
from .info import CPU, USER_ADDRESS_LIMIT, Device

#: Built-in types that export the buffer protocol (Python 3.12+ also finds `__buffer__`).
BUFFER_TYPES: tuple[type, ...] = (
    memoryview,
    bytearray,
    bytes,
    array.array,
    mmap.mmap,
    ctypes.Array,
)
_LITTLE = sys.byteorder == "little"


def _name(x: Any) -> str:
    kind = type(x)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


# --- the producer ------------------------------------------------------------------------------
class Producer:
    """A DLPack producer over memory another object owns; every `__dlpack__` call makes a new
    capsule over the same memory (the core may export twice: once to plan, once to copy)."""

    __slots__ = (
        "_before_export",
        "data",
        "device",
        "dtype",
        "name",
        "owner",
        "read_only",
        "shape",
        "strides",
    )

    def __init__(
        self,
        name: str,
        data: int,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: str,
        owner: object,
        *,
        read_only: bool,
        device: Device = CPU,
        before_export: Callable[[Any], None] | None = None,
    ) -> None:
        self.name = name
        self.data = data
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.owner = owner
        self.read_only = read_only
        self.device = device
        self._before_export = before_export

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object:
        if copy:
            raise BufferError(f"a {self.name} source is shared, never copied, by its producer")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the {self.name} memory is on {self.device}, not {dl_device}")
        versioned = max_version is not None and max_version[0] >= dl.MAJOR_VERSION
        if self.read_only and not versioned:
            raise BufferError(  # as the DLPack spec asks: a legacy capsule cannot say read-only
                f"the {self.name} memory is read-only and a legacy DLPack capsule cannot say so"
            )
        if self._before_export is not None:
            self._before_export(stream)
        return cap.capsule_over(
            self.data,
            self.shape,
            self.strides,
            self.dtype,
            self.owner,
            device=(self.device.type, self.device.id),
            read_only=self.read_only,
            versioned=versioned,
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device.code, self.device.id)

    def __repr__(self) -> str:
        ro = ", read-only" if self.read_only else ""
        return f"<Producer {self.name}: {self.dtype}{list(self.shape)} on {self.device}{ro}>"


# --- dtypes --------------------------------------------------------------------------------------
#: What DLPack cannot carry, refused as the array API's producers refuse it (NumPy's own
#: __dlpack__ for datetime64, byte-swapped or partial-element arrays): also a BufferError.
NO_DLPACK_DTYPE = typed(UnsupportedDTypeError, BufferError)
NO_DLPACK_LAYOUT = typed(UnsupportedLayoutError, BufferError)
_KINDS = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}
_VALID = {
    "bool": (1,),
    "int": (1, 2, 4, 8),
    "uint": (1, 2, 4, 8),
    "float": (2, 4, 8),
    "complex": (8, 16),
}


def _dtype(kind: str, size: int, spelled: str, source: str) -> str:
    if kind not in _VALID or size not in _VALID[kind]:
        raise NO_DLPACK_DTYPE(
            f"{source}: element type {spelled!r} has no DLPack dtype (it carries booleans, "
            "integers, floats and complex numbers)"
        )
    return "bool" if kind == "bool" else f"{kind}{size * 8}"


def _check_order(order: str, size: int, spelled: str, source: str) -> None:
    swapped = order in (">", "!") if _LITTLE else order == "<"
    if swapped and size > 1:
        raise NO_DLPACK_DTYPE(
            f"{source}: element type {spelled!r} is in non-native byte order, which DLPack "
            "cannot describe; byte-swap it first"
        )


def dtype_from_typestr(typestr: str, source: str = "array interface") -> str:
    """The dtype of an array-interface typestr ('<f4', '|b1', ...)."""
    digits = typestr[2:] if isinstance(typestr, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        raise NO_DLPACK_DTYPE(
            f"{source}: cannot read 'typestr' {typestr!r}: it must be a byte order, a kind "
            "letter and an ASCII item size, like '<f4'"
        )
    order, letter, size = typestr[0], typestr[1], int(typestr[2:])
    _check_order(order, size, typestr, source)
    return _dtype(_KINDS.get(letter, letter), size, typestr, source)


_FORMAT_KINDS = {
    **dict.fromkeys("bhilqn", "int"),
    **dict.fromkeys("BHILQNc", "uint"),
    **dict.fromkeys("efd", "float"),
    "?": "bool",
    "Zf": "complex",
    "Zd": "complex",
}


def dtype_from_format(fmt: str, itemsize: int, source: str = "buffer") -> str:
    """The dtype of a buffer-protocol (struct module) format; the size is the exporter's
    itemsize (ctypes spells 8-byte longs '<l', which the struct module would call 4 bytes)."""
    order = fmt[0] if fmt[:1] in ("@", "=", "<", ">", "!") else "@"
    letters = fmt[1:] if fmt[:1] in ("@", "=", "<", ">", "!") else fmt
    kind = _FORMAT_KINDS.get(letters)
    if kind is None:
        raise NO_DLPACK_DTYPE(
            f"{source}: buffer format {fmt!r} has no DLPack dtype (it carries booleans, "
            "integers, floats and complex numbers)"
        )
    _check_order(order, itemsize, fmt, source)
    return _dtype(kind, itemsize, fmt, source)


def _elements(strides: tuple[int, ...], itemsize: int, source: str) -> tuple[int, ...]:
    if any(s % itemsize for s in strides):
        raise NO_DLPACK_LAYOUT(
            f"{source}: strides {list(strides)} (bytes) are not whole {itemsize}-byte "
            "elements, which DLPack cannot describe"
        )
    return tuple(s // itemsize for s in strides)


def _compact(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def _integer(value: Any, field: str, source: str) -> int:
    """An integer field of a producer's description: int() would truncate 2.7 and parse
    '12', hiding a producer's bug, so only true integers are taken."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise UnsupportedTensorError(
            f"{source}: {field} must be an integer, not {type(value).__name__} {value!r}; "
            "the producer describes its memory wrongly"
        ) from None


def _integers(value: Any, field: str, source: str) -> tuple[int, ...]:
    """A tuple (or list) of integers: a string such as '23' is not a shape."""
    if not isinstance(value, tuple | list):
        raise UnsupportedTensorError(
            f"{source}: {field} must be a tuple of integers, not {type(value).__name__} "
            f"{value!r}; the producer describes its memory wrongly"
        )
    return tuple(_integer(n, f"{field} {value!r}", source) for n in value)


def _shape(value: Any, source: str) -> tuple[int, ...]:
    shape = _integers(value, "'shape'", source)
    if len(shape) > 64 or any(n < 0 for n in shape):
        raise UnsupportedTensorError(f"{source}: invalid 'shape' {list(shape)}")
    return shape


def _pointer(value: Any, limit: int, source: str) -> int:
    """The data pointer of an interface: an integer address a pointer can hold (a negative
    one, or 2**70, would be wrapped round by ctypes into some other address)."""
    address = 0 if value is None else _integer(value, "the 'data' pointer", source)
    if not 0 <= address < limit:
        raise UnsupportedTensorError(
            f"{source}: the 'data' pointer {address:#x} is outside any address this process "
            f"can hold (0 to {limit:#x}); the producer describes its memory wrongly"
        )
    return address


# --- the buffer protocol -------------------------------------------------------------------------
class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# Private prototypes: MXNet rebinds ctypes.pythonapi's shared ones when it is imported.
_get_buffer = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int
)(("PyObject_GetBuffer", ctypes.pythonapi))
_release_buffer = ctypes.PYFUNCTYPE(None, ctypes.POINTER(_PyBuffer))(
    ("PyBuffer_Release", ctypes.pythonapi)
)
_PyBUF_FULL_RO = 0x011C  # strides, format, suboffsets; read-only allowed


def buffer_address(view: memoryview) -> int:
    """Address of the first element of `view` (its buffer stays exported while `view` lives)."""
    buffer = _PyBuffer()
    _get_buffer(view, ctypes.byref(buffer), _PyBUF_FULL_RO)
    try:
        return int(buffer.buf or 0)
    finally:
        _release_buffer(ctypes.byref(buffer))


def _memoryview(x: Any, source: str) -> memoryview:
    try:
        return memoryview(x)
    except (TypeError, ValueError, BufferError) as exc:  # closed mmap, released view, ...
        raise UnsupportedTensorError(f"{source}: cannot export its buffer: {exc}") from exc


def from_buffer(x: Any, name: str | None = None, read_only: bool = False) -> Producer:
    """A producer over any object with the buffer protocol (read-only if the buffer is, or
    `read_only` says so). The memoryview taken here is the owner: while it lives, a bytearray
    cannot be resized nor an mmap closed under the consumer."""
    source = name or f"{_name(x)} (buffer protocol)"
    view = _memoryview(x, source)
    if view.suboffsets:
        raise UnsupportedLayoutError(f"{source}: indirect (suboffset) buffers have no DLPack form")
    dtype = dtype_from_format(view.format, view.itemsize, source)
    strides = _elements(tuple(view.strides or ()), view.itemsize, source)
    return Producer(
        source,
        buffer_address(view),
        tuple(view.shape or ()),
        strides,
        dtype,
        view,
        read_only=view.readonly or read_only,
    )


# --- __array_interface__ and __cuda_array_interface__ ------------------------------------------
def _interface(x: Any, attribute: str, source: str) -> Mapping[str, Any]:
    try:
        found = getattr(x, attribute)
    except Exception as exc:  # a property that fails: say which
        raise UnsupportedTensorError(f"{source}: reading {attribute} failed: {exc!r}") from exc
    if not isinstance(found, Mapping) or "shape" not in found or "typestr" not in found:
        raise UnsupportedTensorError(f"{source}: {attribute} is not a dict with shape and typestr")
    if found.get("mask") is not None:
        raise UnsupportedTensorError(
            f"{source}: {attribute} has a mask, which DLPack cannot carry (it would be lost)"
        )
    version = found.get("version", 3)
    if not isinstance(version, int) or not 0 <= version <= 3:
        raise UnsupportedTensorError(f"{source}: {attribute} version {version!r} is not 0 to 3")
    return found


def _layout(
    interface: Mapping[str, Any], source: str
) -> tuple[tuple[int, ...], tuple[int, ...], str, int]:
    """(shape, strides in elements, dtype, itemsize) of an array interface."""
    shape = _shape(interface["shape"], source)
    dtype = dtype_from_typestr(interface["typestr"], source)
    itemsize = max(dl.dtype_bits(dtype) // 8, 1)
    strides = interface.get("strides")
    byte_strides = (
        _compact(shape, itemsize) if strides is None else _shape_like(strides, shape, source)
    )
    return shape, _elements(byte_strides, itemsize, source), dtype, itemsize


def _shape_like(strides: Any, shape: tuple[int, ...], source: str) -> tuple[int, ...]:
    values = _integers(strides, "'strides'", source)
    if len(values) != len(shape):
        raise UnsupportedTensorError(
            f"{source}: 'strides' {list(values)} do not match 'shape' {list(shape)}"
        )
    return values


def _span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """(lowest, highest + 1) byte offsets the view touches, relative to its first element."""
    if 0 in shape:
        return 0, 0
    low = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s > 0)
    return low * itemsize, high * itemsize + itemsize


def from_array_interface(x: Any) -> Producer:
    """A producer over an object's `__array_interface__` (v3: data pointer or buffer, byte
    strides, read-only flag). The owner keeps both the object and the interface dict alive:
    NumPy scalars keep their memory only in the dict."""
    source = f"{_name(x)} (__array_interface__)"
    interface = _interface(x, "__array_interface__", source)
    shape, strides, dtype, itemsize = _layout(interface, source)
    data = interface.get("data")
    if isinstance(data, tuple) and len(data) == 2:
        address, read_only = _pointer(data[0], USER_ADDRESS_LIMIT, source), bool(data[1])
        owner: object = (x, interface)
        if interface.get("offset"):
            raise UnsupportedTensorError(f"{source}: 'offset' is only valid with a buffer 'data'")
    else:  # a buffer object, or None: the object's own buffer
        view = _memoryview(x if data is None else data, source)
        offset = _integer(interface.get("offset") or 0, "'offset'", source)
        low, high = _span(shape, strides, itemsize)
        if offset + low < 0 or offset + high > view.nbytes:
            raise UnsupportedTensorError(
                f"{source}: shape {list(shape)} with strides {list(strides)} and offset "
                f"{offset} reaches outside its {view.nbytes}-byte buffer"
            )
        address, read_only = buffer_address(view) + offset, view.readonly
        owner = (x, interface, view)
    if not address and 0 not in shape:
        raise UnsupportedTensorError(f"{source}: NULL data pointer for shape {list(shape)}")
    return Producer(source, address, shape, strides, dtype, owner, read_only=read_only)


# CUDA: the few driver calls this path needs, through ctypes (libcuda ships with the driver).
_CU_POINTER_ATTRIBUTE_CONTEXT = 1
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_EVENT_DISABLE_TIMING = 2
LEGACY_DEFAULT_STREAM = 1


class CudaDriver:
    """Where a CUDA pointer lives, and one stream waiting for another, per the CUDA array
    interface's synchronisation rules. Without a driver there is no device memory and no
    pending work: the pointer is reported on cuda:0 (no consumer can read it) and waits are
    nothing to do."""

    def __init__(self) -> None:
        self._lib: Any = None
        self._loaded = False

    def _driver(self) -> Any:
        if not self._loaded:
            self._loaded = True
            name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
            try:
                lib = ctypes.CDLL(name)
                if lib.cuInit(0) == 0:
                    self._lib = lib
            except OSError:
                self._lib = None
        return self._lib

    def _check(self, status: int, call: str) -> None:
        if status:
            name = ctypes.c_char_p()
            self._lib.cuGetErrorName(status, ctypes.byref(name))
            raise DeviceError(f"CUDA driver call {call} failed: {(name.value or b'?').decode()}")

    def _attribute(self, kind: Any, attribute: int, pointer: int) -> Any:
        value = kind()
        status = self._lib.cuPointerGetAttribute(
            ctypes.byref(value), attribute, ctypes.c_uint64(pointer)
        )
        self._check(status, "cuPointerGetAttribute")
        return value.value

    def device_of(self, pointer: int) -> Device:
        if self._driver() is None or not pointer:
            return Device("cuda", 0)
        ordinal = self._attribute(ctypes.c_int, _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer)
        managed = self._attribute(ctypes.c_uint, _CU_POINTER_ATTRIBUTE_IS_MANAGED, pointer)
        return Device("cuda_managed" if managed else "cuda", int(ordinal))

    def wait(self, producer: int, consumer: int, pointer: int) -> None:
        """Make stream `consumer` wait for the work queued so far on stream `producer`."""
        lib = self._driver()
        if lib is None:
            return
        context = self._attribute(ctypes.c_void_p, _CU_POINTER_ATTRIBUTE_CONTEXT, pointer)
        self._check(lib.cuCtxPushCurrent_v2(ctypes.c_void_p(context)), "cuCtxPushCurrent")
        try:
            event = ctypes.c_void_p()
            self._check(
                lib.cuEventCreate(ctypes.byref(event), _CU_EVENT_DISABLE_TIMING), "cuEventCreate"
            )
            try:
                self._check(lib.cuEventRecord(event, ctypes.c_void_p(producer)), "cuEventRecord")
                self._check(
                    lib.cuStreamWaitEvent(ctypes.c_void_p(consumer), event, 0),
                    "cuStreamWaitEvent",
                )
            finally:
                lib.cuEventDestroy_v2(event)  # released once the wait has happened
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


#: the driver the CUDA-array-interface path calls (tests put a recorder here)
CUDA: Any = CudaDriver()


def _ordered(producer_stream: int | None, pointer: int) -> Callable[[Any], None] | None:
    """What to do before each export: make the consumer's stream wait for the producer's.

    The interface's `stream` is where the producer queued its writes (None: nothing to wait
    for). The consumer's stream comes from DLPack's `__dlpack__(stream=...)`: None means the
    legacy default stream, -1 asks for no synchronisation, and 0 (what torch reports for its
    default stream) is the legacy default stream too.
    """
    if producer_stream is None:
        return None

    def wait(consumer: Any) -> None:
        if consumer == -1:
            return
        target = LEGACY_DEFAULT_STREAM if consumer in (None, 0) else int(consumer)
        if target != producer_stream:
            CUDA.wait(producer_stream, target, pointer)

    return wait


def from_cuda_array_interface(x: Any) -> Producer:
    """A producer over an object's `__cuda_array_interface__` (v3 with its `stream`). No CuPy
    needed: the memory is described as it is, and READ_ONLY travels in versioned capsules."""
    source = f"{_name(x)} (__cuda_array_interface__)"
    interface = _interface(x, "__cuda_array_interface__", source)
    shape, strides, dtype, _ = _layout(interface, source)
    data = interface.get("data")
    if not (isinstance(data, tuple) and len(data) == 2):
        raise UnsupportedTensorError(f"{source}: 'data' must be (pointer, read_only)")
    address, read_only = _pointer(data[0], 1 << 64, source), bool(data[1])
    if not address and 0 not in shape:
        raise UnsupportedTensorError(f"{source}: NULL data pointer for shape {list(shape)}")
    stream = interface.get("stream")
    if stream is not None and (not isinstance(stream, int) or isinstance(stream, bool)):
        raise UnsupportedTensorError(f"{source}: 'stream' must be an integer or None")
    if stream == 0:
        raise UnsupportedTensorError(
            f"{source}: 'stream' is 0, which the CUDA array interface disallows as ambiguous "
            "(1 is the legacy default stream, 2 the per-thread default stream)"
        )
    return Producer(
        source,
        address,
        shape,
        strides,
        dtype,
        (x, interface),
        read_only=read_only,
        device=CUDA.device_of(address),
        before_export=_ordered(stream, address),
    )


# --- Arrow ---------------------------------------------------------------------------------------
_ARROW_NUMBERS = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "halffloat",
    "float",
    "double",
}
_ARROW_DTYPES = {"halffloat": "float16", "float": "float32", "double": "float64"}


def from_arrow(x: Any) -> Producer:
    """A producer over a pyarrow Array (or a ChunkedArray of one chunk), read-only: Arrow
    memory is immutable. Nulls are refused: DLPack has no validity mask, and filling them
    would invent values."""
    pa = sys.modules["pyarrow"]
    source = f"{_name(x)} (Arrow)"
    if isinstance(x, pa.ChunkedArray):
        if x.num_chunks > 1:
            raise UnsupportedLayoutError(
                f"{source}: {x.num_chunks} chunks are {x.num_chunks} separate buffers; "
                "combine them first (x.combine_chunks(), a copy) or convert each chunk"
            )
        x = x.chunk(0) if x.num_chunks else x.combine_chunks()
    kind = str(x.type)
    if kind not in _ARROW_NUMBERS:
        hint = " (booleans are bit-packed; cast to uint8 first)" if kind == "bool" else ""
        raise UnsupportedDTypeError(
            f"{source}: Arrow type {kind} has no DLPack form{hint}; fixed-width integers and "
            "floats convert"
        )
    if x.null_count:
        raise UnsupportedTensorError(
            f"{source}: the array holds {x.null_count} null(s), and DLPack has no validity "
            "mask; fill them (x.fill_null(value)) or drop them (x.drop_null()) first"
        )
    dtype = _ARROW_DTYPES.get(kind, kind)
    itemsize = dl.dtype_bits(dtype) // 8
    buffer = x.buffers()[1]
    if buffer is not None and not buffer.is_cpu:
        raise DeviceError(f"{source}: only Arrow arrays in host memory convert")
    address = (buffer.address + x.offset * itemsize) if buffer is not None and len(x) else 0
    return Producer(source, address, (len(x),), (1,), dtype, x, read_only=True)


# --- recognition ---------------------------------------------------------------------------------
def _is_arrow(x: Any) -> bool:
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(x, (pa.Array, pa.ChunkedArray))


def _is_arrow_buffer(x: Any) -> bool:
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(x, pa.Buffer)


def from_arrow_buffer(x: Any) -> Producer:
    """A producer over a `pyarrow.Buffer`: its bytes as uint8 (as `bytes` convert; its buffer
    protocol says signed chars), read-only even when mutable, as Arrow memory is by contract."""
    source = f"{_name(x)} (Arrow buffer)"
    if not x.is_cpu:
        raise DeviceError(f"{source}: only Arrow buffers in host memory convert")
    return from_buffer(memoryview(x).cast("B"), source, read_only=True)


def _has_buffer(x: Any) -> bool:
    return isinstance(x, BUFFER_TYPES) or hasattr(type(x), "__buffer__")


def _offers(x: Any, attribute: str) -> bool:
    """Whether `x` has `attribute`, without evaluating a property: PIL's
    `__array_interface__` copies the whole image each time it is read."""
    return hasattr(type(x), attribute) or attribute in getattr(x, "__dict__", ())


def recognises(x: Any) -> bool:
    """Whether `as_producer` would take `x` (attribute and type checks only)."""
    if type(x).__module__.startswith("pyarrow"):
        return _is_arrow(x) or _is_arrow_buffer(x)
    if hasattr(x, "__dlpack__"):
        return False
    return (
        _offers(x, "__cuda_array_interface__")
        or _offers(x, "__array_interface__")
        or _has_buffer(x)
    )


#: tables a first hour passes for tensors, by (top-level module, type name): what converts
#: instead (recognised by name: pandas and polars are never imported here)
_TABLES = {
    ("pandas", "Series"): "x.to_numpy()",
    ("pandas", "Index"): "x.to_numpy()",
    ("pandas", "DataFrame"): "x.to_numpy() (one dtype for all its columns) or x[column].to_numpy()",
    ("polars", "Series"): "x.to_numpy()",
    ("polars", "DataFrame"): "x.to_numpy() (one dtype for all its columns) or x[column].to_numpy()",
}


#: a framework's tensors that are not one buffer, by (top-level module, type name): what
#: converts instead (recognised by name, as the tables: the adapters own dense tensors only)
_COMPOSITES = {
    ("tensorflow", "RaggedTensor"): "x.to_tensor() (padded) or x.flat_values (every value, "
    "flat), with x.row_splits for the rows",
    ("tensorflow", "SparseTensor"): "tf.sparse.to_dense(x), or x.values and x.indices",
}


def remedy(x: Any) -> str:
    """What to convert instead of `x`, for a non-tensor a user is likely to pass ("" for
    others): a table's values, a ragged or sparse tensor's dense form, a Python number as a
    0-d array, a str (arguments swapped?)."""
    kind = type(x)
    module = kind.__module__.partition(".")[0]
    table = _TABLES.get((module, kind.__name__))
    if table is not None:
        return f"a {module} {kind.__name__} is not a tensor: convert its values, {table}"
    composite = _COMPOSITES.get((module, kind.__name__))
    if composite is not None:
        return (
            f"a {module} {kind.__name__} is not one buffer, which DLPack needs: convert {composite}"
        )
    if isinstance(x, str):
        return (
            "a str is text, not a tensor: convert(x, to) takes the tensor first and the "
            "framework second; for the text's bytes, convert x.encode() (uint8)"
        )
    if isinstance(x, (bool, int, float, complex)):
        return (
            f"a Python {kind.__name__} is a number, not a tensor: make a 0-d array of it "
            "first, such as numpy.asarray(x)"
        )
    return ""


def as_producer(x: Any) -> Producer | None:
    """A DLPack producer for a source without DLPack, or None if `x` is none of the kinds.

    Arrow arrays are taken even where pyarrow has `__dlpack__`, so that nulls, booleans and
    chunks get the same clear refusals on every pyarrow version. Any other object with
    `__dlpack__` is left to its own producer.
    """
    if type(x).__module__.startswith("pyarrow"):
        if _is_arrow_buffer(x):
            return from_arrow_buffer(x)
        return from_arrow(x) if _is_arrow(x) else None
    if hasattr(x, "__dlpack__"):
        return None
    if _offers(x, "__cuda_array_interface__"):
        return from_cuda_array_interface(x)
    if _offers(x, "__array_interface__"):
        return from_array_interface(x)
    if _has_buffer(x):
        return from_buffer(x)
    return None


__all__ = [
    "CUDA",
    "BUFFER_TYPES",
    "CudaDriver",
    "Producer",
    "as_producer",
    "buffer_address",
    "dtype_from_format",
    "dtype_from_typestr",
    "from_array_interface",
    "from_arrow",
    "from_arrow_buffer",
    "from_buffer",
    "from_cuda_array_interface",
    "recognises",
    "remedy",
]
