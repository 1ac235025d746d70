"""CuPy adapter: GPU arrays both ways through DLPack, plus `__cuda_array_interface__` sources.

CuPy holds CUDA memory only. It declares what it can move besides what it holds: its arrays
to the host (`device="cpu"` gives a NumPy copy that any CPU framework takes, `moves_to`), and
host tensors onto the GPU as it imports them (`device="cuda"`, `moves_from`).

Without cupy or without a CUDA device the adapter still imports and registers; `interop list`
shows why it cannot convert, and conversions to or from it raise `DeviceError`. Objects that
offer only `__cuda_array_interface__` (Numba, PyCUDA, ...) are not CuPy's: the core's
`interop.sources` takes them, with or without CuPy. CuPy ignores DLPack's READ_ONLY flag, so
read-only sources are copied; negative strides are copied first too (untested in CuPy here).
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

from interop import Adapter, Capabilities, Device, DeviceError
from interop import capsule as cap
from interop.adapter import DLPACK, OBJECT, WRITABLE
from interop.info import BROADCAST, CANONICAL, CONTIGUOUS, PERMUTED, STRIDED
from interop.roles import Devices, Streams, Testing
from interop.samples import indexed_views, sample_values
from interop.versions import release

CUDA_DEVICES = frozenset({"cuda", "cuda_managed"})
HOST_ONLY = "CuPy arrays live in CUDA memory only; ask for device='cuda'"
DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 float32 float64 complex64 complex128".split()
)  # no float8: cupy.from_dlpack has no dtype for them (CuPy 14.2)
#: the first CuPy whose from_dlpack takes bfloat16 (14.2.0 did, values exact, on an H200)
BFLOAT16_FROM = (14,)


def _caps(dtypes: frozenset[str]) -> Capabilities:
    return Capabilities(
        export_dtypes=dtypes,
        import_dtypes=dtypes,
        exports=frozenset({DLPACK}),
        imports=frozenset({OBJECT}),
        devices=CUDA_DEVICES,
        moves_to=CUDA_DEVICES | {"cpu"},
        moves_from=frozenset({"cpu"}),
        import_layouts=frozenset({CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST}),
        import_access=WRITABLE,
        dlpack_version=(1, 0),
        notes=("CUDA only: CPU tensors need device='cuda', CuPy arrays device='cpu'",),
    )


CAPS = _caps(DTYPES)
CAPS_BFLOAT16 = _caps(DTYPES | {"bfloat16"})


@cache
def _installed_version(adapter: Adapter) -> str | None:
    return adapter.framework_version()  # (distribution metadata: read once)


@cache
def _caps_for(version: str | None) -> Capabilities:
    return CAPS_BFLOAT16 if version and release(version) >= BFLOAT16_FROM else CAPS


@cache
def _probe() -> tuple[str | None, int]:
    """(why CuPy cannot convert here, or None; how many CUDA devices it sees), once."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy cannot be imported: {exc}", 0
    try:
        count = int(cupy.cuda.runtime.getDeviceCount()) if cupy.cuda.is_available() else 0
    except Exception as exc:  # CUDARuntimeError without a driver
        return f"no CUDA device ({type(exc).__name__}: {exc})", 0
    return (None, count) if count else ("no CUDA device", 0)


class _TrueStrides:
    """A CuPy array whose DLPack capsules get its true strides. CuPy 14.2 divides negative
    byte strides by the item size as unsigned numbers (int16 `a[::-1]` exports the stride
    2**63 - 1), which torch aborts on (measured on an H200); the capsule's strides, written
    by CuPy for this capsule alone, are rewritten from the array's own before anyone reads
    them."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        capsule = self.array.__dlpack__(**kwargs)
        tensor = cap.managed(*cap.pointer(capsule)).dl_tensor
        if tensor.strides and tensor.ndim == self.array.ndim:
            for i, stride in enumerate(self.array.strides):
                tensor.strides[i] = stride // self.array.itemsize
        return capsule


class CupyAdapter(Adapter, Devices, Streams, Testing):
    name = "cupy"
    modules = ("cupy",)
    distributions = ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy")
    contract = (2, 0)

    def unavailable(self) -> str | None:
        if not self.installed():
            return "cupy is not installed (pip install cupy-cuda12x for CUDA 12; it needs a GPU)"
        return _probe()[0]

    device_examples = ("cupy.cuda.Device(0)",)

    def parse_device(self, device: Any) -> Device | None:
        """A cupy.cuda.Device as the GPU it names (ROCm builds' too)."""
        cupy = sys.modules["cupy"]
        if not isinstance(device, cupy.cuda.Device):
            return None
        return Device("rocm" if cupy.cuda.runtime.is_hip else "cuda", int(device.id))

    def device_unavailable(self, device: Device) -> str | None:
        if device.type not in CUDA_DEVICES:
            return HOST_ONLY
        why = self.unavailable()
        if why:
            return why
        count = _probe()[1]
        if device.id >= count:
            return f"CuPy sees {count} CUDA device(s), not device {device.id}"
        return None

    def _cupy(self) -> Any:
        why = self.unavailable()
        if why:
            raise DeviceError(f"cupy cannot convert here: {why}")
        import cupy

        return cupy

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["cupy"].ndarray,)

    def capabilities(self) -> Capabilities:
        return _caps_for(_installed_version(self))

    def _as_cupy(self, x: Any) -> Any:
        cupy = self._cupy()
        return x if isinstance(x, cupy.ndarray) else cupy.asarray(x)

    def export(self, x: Any, *, writable: bool = False) -> Any:
        if not hasattr(x, "__dlpack__"):
            return self._as_cupy(x)
        if x.itemsize > 1 and any(stride < 0 for stride in x.strides):
            return _TrueStrides(x)
        return x  # CuPy arrays, and to_device's host copies

    def from_dlpack(self, source: Any) -> Any:
        if source.info.device.type not in CUDA_DEVICES:
            raise DeviceError(f"cupy cannot import a tensor on {source.info.device}: {HOST_ONLY}")
        # CuPy calls source.__dlpack__(stream=<its current stream>, max_version=(1, 0)).
        return self._cupy().from_dlpack(source)

    def from_dlpack_to(self, source: Any, device: Device) -> Any:
        """A host tensor copied onto a GPU: NumPy (CuPy's own host type) reads it, CuPy copies."""
        import numpy

        cupy = self._cupy()
        host = numpy.from_dlpack(source)
        with cupy.cuda.Device(device.id):
            return cupy.array(host, copy=True)

    def copy(self, x: Any) -> Any:
        array = self._as_cupy(x)
        with array.device:  # ndarray.copy copies onto the current device
            return array.copy(order="C")

    def to_device(self, x: Any, device: Device) -> Any:
        cupy = self._cupy()
        array = self._as_cupy(x)
        if device.type == "cpu":
            return cupy.asnumpy(array)  # a NumPy array: CuPy's form of host memory
        if device.type not in CUDA_DEVICES:
            raise DeviceError(f"CuPy cannot move arrays to {device}")
        with cupy.cuda.Device(device.id):
            return array.copy(order="C")

    def consumer_stream(self, device: Device) -> Any:
        """The stream CuPy reads on: its current stream on that device (None: the legacy
        default stream, which DLPack calls 1; CuPy's per-thread default stream is 2)."""
        if device.type not in CUDA_DEVICES or self.unavailable():
            return None
        cupy = self._cupy()
        with cupy.cuda.Device(device.id):
            return cupy.cuda.get_current_stream().ptr or None

    # --- for the conformance kit: CuPy's own APIs only ---------------------------------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        cupy = self._cupy()
        return cupy.array(sample_values(dtype, shape), dtype=dtype).reshape(shape)

    def views(self, x: Any) -> dict[str, Any]:
        return indexed_views(x)

    def to_bytes(self, x: Any) -> bytes:
        return bytes(self._cupy().asnumpy(x).tobytes(order="C"))

    def data_address(self, x: Any) -> int:
        return int(x.data.ptr)

    def mutate(self, x: Any) -> bool:
        x[(0,) * x.ndim] = 1
        x.device.synchronize()
        return True

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        cupy = self._cupy()
        if x.dtype == cupy.bool_:
            return cupy.logical_not(x), cupy.count_nonzero(x)
        return x + x, x.sum()
