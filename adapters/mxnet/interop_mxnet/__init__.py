"""MXNet 1.9 adapter: legacy capsules both ways, canonical layouts only, eight dtypes.

MXNet 1.9.1 is the final release. It speaks DLPack through `mx.nd.to_dlpack_for_read/_write`
and `mx.nd.from_dlpack` (legacy capsules, no `__dlpack__`), and under NumPy 2 it imports only
after `numpy_compat.apply()` adds the NumPy names it reads. The adapter routes around its
pitfalls: it waits for MXNet's asynchronous engine before exporting, relabels its booleans
(exported as 1-bit `uint1`, stored one byte each) as DLPack bool and back, declares bfloat16
absent (MXNet would take it as raw `void16`), declares that it ignores `byte_offset` and takes
canonical strides only (others are copied first), builds zero-size results itself (MXNet
rejects most zero-size strides) and refuses sparse arrays (their export is the values alone).

Sources may be `mx.nd.NDArray` or `mxnet.numpy.ndarray`; results are `mx.nd.NDArray`, and
`y.as_np_ndarray()` gives the `mx.np` view of the same memory.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import byref, c_int
from functools import cache
from typing import Any

from interop import (
    Adapter,
    Capabilities,
    Device,
    DeviceError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
    UnsupportedTensorError,
)
from interop import capsule as cap
from interop.adapter import CAPSULE, WRITABLE
from interop.errors import builtin_kind
from interop.info import CANONICAL, read_capsule
from interop.roles import Devices, ExportHazards, FastPath, ImportRefusals, Streams, Testing
from interop.samples import sample_values

from . import numpy_compat

__all__ = ["DTYPES", "MXNetAdapter", "import_mxnet", "numpy_compat"]

DTYPES = frozenset("bool int8 uint8 int32 int64 float16 float32 float64".split())
#: DLPack (code, bits) of a boolean as MXNet labels it (uint1) and as DLPack names it (bool)
MXNET_BOOL, DLPACK_BOOL = (1, 1), (6, 8)

CAPS = Capabilities(
    export_dtypes=DTYPES,
    import_dtypes=DTYPES,
    #: MXNetError, a RuntimeError; complex128: a UnicodeDecodeError (ValueError) while wording it
    import_errors=(RuntimeError, ValueError),
    import_gaps={"bfloat16": "MXNet 1.9.1 would take it silently as raw void16 bytes"},
    exports=frozenset({CAPSULE}),
    imports=frozenset({CAPSULE}),
    devices=frozenset({"cpu"}),
    import_layouts=frozenset({CANONICAL}),
    import_byte_offset=False,
    import_access=WRITABLE,
    #: its NDArray reads shape () as "unknown": kernels on a 0-d import fail ("inferring
    #: shapes failed"), as on mx.nd.array of a 0-d array; MXNet's own scalars are (1,)
    min_ndim=1,
    notes=("legacy capsules only; results are mx.nd.NDArray (y.as_np_ndarray() for mx.np)",),
)


def import_mxnet() -> Any:
    """`import mxnet`, after adding the NumPy names MXNet 1.9.1 needs (see numpy_compat).

    Call this (or `numpy_compat.apply()`) instead of a first `import mxnet` under NumPy 2.
    """
    if "mxnet" not in sys.modules:
        numpy_compat.apply()
    import mxnet

    return mxnet


class _PerHandle:
    """Facts of the C++ array an NDArray handle names, remembered per handle object: its
    dtype, device and shape never change (MXNet makes a new handle to reshape or unpickle, and
    fills in only unknown shapes, which are never remembered), nor its data address once
    allocated (measured through in-place ops, views and attach_grad). The handle object is
    held with its entry, so no other object can take its id; at most 4,096 are kept."""

    KEPT = 4096

    def __init__(self) -> None:
        self.known: dict[int, tuple[Any, Any]] = {}

    def get(self, handle: Any) -> Any:
        entry = self.known.get(id(handle))
        return entry[1] if entry is not None and entry[0] is handle else None

    def put(self, handle: Any, fact: Any) -> None:
        if len(self.known) >= self.KEPT:
            self.known.clear()  # the handles of arrays long gone, mostly
        self.known[id(handle)] = (handle, fact)


_FINGERPRINTS, _ADDRESSES = _PerHandle(), _PerHandle()


@cache
def _c_api() -> tuple[Any, ...]:
    """MXNet's C calls behind an NDArray's dtype, context and shape, bound once:
    its Python properties wrap each in a frame, a Context or a NumPy dtype (2.9 us for the
    three the fingerprint needs, 2.0 called directly)."""
    mx = import_mxnet()
    lib = mx.base._LIB
    wide = mx.ndarray.ndarray._int64_enabled()
    shape = lib.MXNDArrayGetShapeEx64 if wide else lib.MXNDArrayGetShapeEx
    extent = ctypes.POINTER(ctypes.c_int64 if wide else ctypes.c_int)
    return lib.MXNDArrayGetDType, lib.MXNDArrayGetContext, shape, extent


@cache
def _fast_import() -> Any:
    """The fast path's import: `mx.nd.from_dlpack`'s three C calls without the Python around
    them: a name check through MXNet's rebound capsule prototypes (taking the pointer checks
    it too), a destructor reset MXNet needs only for its own capsules (whose destructor
    checks the name anyway), and NDArray's Python `__init__` where it only sets the two slots
    (probed). 3.1 against 3.7 us."""
    mx = import_mxnet()
    from_dlpack = mx.base._LIB.MXNDArrayFromDLPackEx
    ndarray, handle_type, check_call = mx.nd.NDArray, mx.base.NDArrayHandle, mx.base.check_call
    pointer, mark_used, void_p = cap.pointer, cap.mark_used, ctypes.c_void_p
    base = ndarray.__mro__[1]
    plain_init = (
        base.__module__ == "mxnet._ctypes.ndarray"
        and ndarray.__init__ is base.__init__
        and getattr(base, "__slots__", None) == ["handle", "writable"]
    )
    new = ndarray.__new__
    ndim_at = lambda at: ctypes.c_int32.from_address(at).value  # noqa: E731

    def import_capsule(capsule: Any) -> Any:
        address, _ = pointer(capsule, False)  # a legacy capsule (DLPackError: not one)
        if not ndim_at(address + 16):  # DLTensor.ndim: 0-d is refused by the full path's plan
            raise UnsupportedLayoutError("MXNet has no usable 0-d arrays (min_ndim)")
        handle = handle_type()
        check_call(from_dlpack(void_p(address), False, byref(handle)))
        mark_used(capsule, False)
        if not plain_init:
            return ndarray(handle=handle)
        out = new(ndarray)
        out.handle, out.writable = handle, True
        return out

    return import_capsule


@cache
def _fast_exports(bare: bool = False) -> tuple[Any, Any]:
    """The fast path's exports, for reading and for writing: `to_dlpack_for_read/_write`'s C
    calls (wait for MXNet's engine, export) and the capsule they make, with MXNet's own
    destructor, without their Python: 1.9 against 2.1 us. `bare`: with no destructor at all
    (`MXNetAdapter.bare_exporter`)."""
    mx = import_mxnet()
    lib, check_call = mx.base._LIB, mx.base.check_call
    to_dlpack, handle_type = lib.MXNDArrayToDLPack, mx.base.DLPackHandle
    module = sys.modules[mx.nd.to_dlpack_for_read.__module__]
    destructor = 0 if bare else ctypes.cast(module._c_dlpack_deleter, ctypes.c_void_p).value
    new_capsule = cap.new_capsule

    def exporter(wait: Any) -> Any:
        def export(x: Any) -> Any:
            handle = x.handle
            check_call(wait(handle))
            tensor = handle_type()
            check_call(to_dlpack(handle, byref(tensor)))
            return new_capsule(tensor.value, False, destructor)

        return export

    return exporter(lib.MXNDArrayWaitToRead), exporter(lib.MXNDArrayWaitToWrite)


def _numpy() -> Any:
    import numpy  # MXNet's own dependency, imported only once MXNet is involved

    return numpy


#: MXNet's context types, by the DLPack device each names
MX_DEVICES = {"cpu": "cpu", "cpu_shared": "cpu", "gpu": "cuda", "cpu_pinned": "cuda_host"}


class MXNetAdapter(Adapter, FastPath, ImportRefusals, ExportHazards, Devices, Streams, Testing):
    name = "mxnet"
    aliases = ("mx",)
    modules = ("mxnet",)
    distributions = ("mxnet", "mxnet-mkl", "mxnet-native", "mxnet-cu112", "mxnet-cu102")
    contract = (2, 0)

    def import_framework(self) -> Any:
        return import_mxnet()

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["mxnet"].nd.NDArray,)  # mxnet.numpy.ndarray is a subclass

    def capabilities(self) -> Capabilities:
        return CAPS

    device_examples = ("mxnet.cpu()", "mxnet.gpu(0)")

    def parse_device(self, device: Any) -> Device | None:
        """An MXNet context (mx.cpu(), mx.gpu(0), an array's `.context`) as the DLPack device
        it names: its shared-memory CPU contexts are host memory too."""
        mx = sys.modules["mxnet"]
        if not isinstance(device, mx.context.Context):
            return None
        kind = MX_DEVICES.get(device.device_type)
        if kind is None:
            raise DeviceError(f"{device} is an MXNet context DLPack cannot reach")
        return Device(kind, 0 if kind in ("cpu", "cuda_host") else int(device.device_id))

    def export_notes(self, x: Any) -> tuple[str, ...]:
        notes = (
            "MXNet's asynchronous engine is waited on: pending writes finish first, and "
            "pending reads too where the result may be written",
        )
        if _numpy().dtype(x.dtype).kind == "b":
            notes += ("MXNet labels its 1-byte booleans uint1; they are relabelled DLPack bool",)
        return notes

    def export(self, x: Any, *, writable: bool = False) -> Any:
        mx = import_mxnet()
        if x.stype != "default":
            raise UnsupportedTensorError(
                f"an MXNet {x.stype} sparse array has no DLPack form (its export would be its "
                f"stored values alone); convert x.tostype('default') instead"
            )
        # Both calls wait for MXNet's engine (writes, or reads and writes) before exporting.
        capsule = mx.nd.to_dlpack_for_write(x) if writable else mx.nd.to_dlpack_for_read(x)
        if _numpy().dtype(x.dtype).kind == "b":  # MXNet stores 1-byte booleans, labels uint1
            cap.retag(capsule, *DLPACK_BOOL)
        return capsule

    # --- the fast path ---------------------------------------------------------------------
    def fingerprint(self, x: Any) -> Any:
        """(dtype, device type, device id) codes of a dense NDArray with elements: MXNet exports
        no strides (row-major). Empty arrays take the full path. Remembered per handle
        (`_PerHandle`): 0.2 us where MXNet's three C calls cost 1.6."""
        handle = x.handle
        fingerprint = _FINGERPRINTS.get(handle)
        if fingerprint is None:
            fingerprint = self._fingerprint(handle)
            if fingerprint is not None:
                _FINGERPRINTS.put(handle, fingerprint)
        return fingerprint

    @staticmethod
    def _fingerprint(handle: Any) -> tuple[int, int, int] | None:
        get_dtype, get_context, get_shape, extent = _c_api()
        dtype, device, index, ndim, extents = c_int(), c_int(), c_int(), c_int(), extent()
        if (
            get_dtype(handle, byref(dtype))
            or get_context(handle, byref(device), byref(index))
            or get_shape(handle, byref(ndim), byref(extents))
        ):
            return None  # (MXNet's error stays for the full path to raise)
        count = ndim.value
        if count < 0 or 0 in extents[:count]:
            return None  # unknown (not computed yet) or empty
        return (dtype.value, device.value, index.value)

    def fast_address(self, x: Any) -> int:
        """`data_address`, remembered per handle once allocated (`_PerHandle`): 0.2 us where
        the C call costs 0.7 (a failure raises: the full path then)."""
        handle = x.handle
        address = _ADDRESSES.get(handle)
        if address is None:
            address = self.data_address(x)
            if address:
                _ADDRESSES.put(handle, address)
        return address  # type: ignore[no-any-return]

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        if versioned:
            return None
        export = _fast_exports()[writable]
        if dtype == "bool":  # relabelled on the way: the adapter's own export
            return self._export_writable if writable else self.export
        return export

    def bare_exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        """`exporter`'s capsules without MXNet's destructor, a ctypes callback that runs
        after every conversion even when the consumer took the capsule: 0.6-1.2 us of
        Python, and more around MXNet's next engine wait (pure routes: mxnet -> torch
        1.5-2 us less, paired in one process)."""
        if versioned or dtype == "bool":
            return None
        return _fast_exports(True)[writable]

    def importer(self, as_object: bool, dtype: str) -> Any:
        if as_object:
            return None
        return self.from_dlpack if dtype == "bool" else _fast_import()

    def _export_writable(self, x: Any) -> Any:
        return self.export(x, writable=True)

    def from_dlpack(self, source: Any) -> Any:
        mx = import_mxnet()
        address, versioned = cap.pointer(source)
        tensor = cap.managed(address, versioned).dl_tensor
        too = self.ndim_refusal(tensor.ndim)  # (planned conversions never come here with one)
        if too:
            raise UnsupportedLayoutError(f"MXNet cannot import a 0-d array: {too}")
        shape = tuple(tensor.shape[: tensor.ndim])
        if 0 in shape:  # nothing to share, and MXNet rejects most zero-size strides
            with mx.util.np_shape(True):
                return mx.nd.zeros(shape, dtype=read_capsule(source).dtype)
        if (tensor.dtype.code, tensor.dtype.bits) == DLPACK_BOOL:
            cap.retag(source, *MXNET_BOOL)
        try:
            return mx.nd.from_dlpack(source)
        except mx.base.MXNetError as exc:
            raise builtin_kind(exc, UnsupportedTensorError)(  # a RuntimeError, as MXNetError
                f"MXNet refused the DLPack tensor: {exc}"
            ) from exc

    def ndim_refusal(self, ndim: int) -> str | None:
        """0-d arrays are MXNet's own while its NumPy shape semantics are on
        (`mx.npx.set_np()`, `mx.util.np_shape()`): asked on every call that plans, since the
        program may turn them on or off at any time (routes never take a 0-d tensor)."""
        if ndim or "mxnet" not in sys.modules:
            return super().ndim_refusal(ndim)
        if sys.modules["mxnet"].util.is_np_shape():
            return None
        return (
            "its NDArrays read shape () as unknown and its kernels fail on them, unless "
            "MXNet's NumPy semantics are on (mx.npx.set_np()), and they are off"
        )

    def copy(self, x: Any) -> Any:
        # NumPy shape semantics, or MXNet reads 0-d and zero-size shapes as unknown.
        with import_mxnet().util.np_shape(True):
            return x.copy()

    def to_device(self, x: Any, device: Device) -> Any:
        mx = import_mxnet()
        if device.type not in ("cpu", "cuda"):
            raise DeviceError(f"MXNet has no {device} device")
        context = mx.cpu(device.id) if device.type == "cpu" else mx.gpu(device.id)
        try:
            with mx.util.np_shape(True):
                return x.copyto(context)
        except mx.base.MXNetError as exc:
            raise DeviceError(f"MXNet cannot copy the array to {device}: {exc}") from exc

    def synchronize(self) -> None:
        """Wait for MXNet's engine, which frees memory (and calls DLPack deleters) later."""
        import_mxnet().nd.waitall()

    # --- for the conformance kit: MXNet's own APIs only --------------------------------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        if dtype not in DTYPES:
            raise UnsupportedDTypeError(f"MXNet cannot make {dtype} arrays")
        mx = import_mxnet()
        values = _numpy().array(sample_values(dtype, shape), dtype=dtype).reshape(shape)
        return mx.nd.array(values, dtype=dtype)

    def views(self, x: Any) -> dict[str, Any]:
        # MXNet has no strided views; slicing the first axis is a zero-copy offset view.
        return {"offset": x[1:]} if x.ndim and x.shape[0] > 1 else {}

    def to_bytes(self, x: Any) -> bytes:
        return bytes(x.asnumpy().tobytes(order="C"))  # asnumpy waits for the engine

    def data_address(self, x: Any) -> int:
        """The address MXNet's C API reports for the array's first element (MXNDArrayGetData)."""
        mx = import_mxnet()
        pointer = ctypes.c_void_p()
        mx.base.check_call(mx.base._LIB.MXNDArrayGetData(x.handle, ctypes.byref(pointer)))
        return int(pointer.value or 0)

    def mutate(self, x: Any) -> bool:
        if x.size == 0:
            return False
        x.reshape((-1,))[0] = 1  # a view: reshape shares memory in MXNet
        x.wait_to_read()  # the write is queued on MXNet's engine until then
        return True

    def array_namespace(self) -> Any:
        return self.import_framework().np

    def namespace_array(self, x: Any) -> Any:
        return x if isinstance(x, import_mxnet().np.ndarray) else x.as_np_ndarray()

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        mx = import_mxnet()
        if x.stype != "default" or _numpy().dtype(x.dtype).name not in DTYPES:
            return None
        # mx.np: NumPy shape semantics (a 0-d sum) and kernels for booleans, which mx.nd lacks.
        with mx.util.np_shape(True):
            data = x if isinstance(x, mx.np.ndarray) else x.as_np_ndarray()
            if data.dtype == _numpy().bool_:
                return mx.np.logical_not(data), mx.np.sum(data, dtype="int64")
            return data + data, mx.np.sum(data)
