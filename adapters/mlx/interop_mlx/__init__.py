"""MLX adapter: MLX arrays out zero-copy (legacy capsules, views as views), copies in.

Written against docs/plugins.md only, from facts measured with mlx 0.32.4 on Linux CPU
(docs/frameworks/mlx.md). `mx.from_dlpack` always copies host memory (declared
`import_copies`, so `explain` says so and `copy=False` refuses), and silently narrows float64
to float32; float64 is therefore carried as its raw bits (relabelled uint64) and viewed back
as float64, bit for bit. MLX has no complex128 (narrowed to complex64: refused with the reason)
and no float8. It refuses negative strides (those are copied at the source first) and honours
byte_offset. MLX arrays cannot be written in place through MLX's API (`x[i] = v` makes a new
array): they are declared immutable, so `explain` warns when a writable consumer (PyTorch)
aliases one. Exports evaluate lazy arrays first and carry views with their strides and a
`byte_offset`.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from interop import Adapter, Capabilities, Device, UnsupportedDTypeError
from interop.adapter import DLPACK_LEGACY, IMMUTABLE, OBJECT, ExchangeObject
from interop.capsule import capsule_over
from interop.info import BROADCAST, CANONICAL, CONTIGUOUS, CPU, PERMUTED, STRIDED
from interop.roles import Devices, Testing
from interop.samples import build_sample, indexed_views
from interop.sources import buffer_address

#: DLPack dtype name -> mlx.core attribute, for every dtype MLX holds (measured both ways)
MLX_DTYPES = {
    "bool": "bool_",
    **{n: n for n in "int8 int16 int32 int64 uint8 uint16 uint32 uint64".split()},
    **{n: n for n in "float16 bfloat16 float32 float64 complex64".split()},
}
DTYPES = frozenset(MLX_DTYPES)

CAPS = Capabilities(
    export_dtypes=DTYPES,
    import_dtypes=DTYPES,  # float64 through its raw bits (from_dlpack below)
    import_errors=(ValueError,),  # mx.from_dlpack: "Cannot convert array to mlx"
    import_gaps={
        "complex128": "MLX has no complex128; mx.from_dlpack would narrow it to complex64",
    },
    exports=frozenset({DLPACK_LEGACY}),  # __dlpack__ ignores max_version: legacy capsules
    imports=frozenset({OBJECT}),  # mx.from_dlpack takes both capsule kinds; we pass one
    devices=frozenset({"cpu"}),
    import_copies=frozenset({"cpu"}),  # mx.from_dlpack(copy=False) raises on CPU: it copies
    # negative strides: "Cannot convert DLPack arrays with negative strides to mlx array"
    import_layouts=frozenset({CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST}),
    import_byte_offset=True,
    import_access=IMMUTABLE,
    immutable=True,
    copy_alignment=8,  # its allocator's arrays (copies included) are 8-byte aligned, measured
    dlpack_version=(1, 3),  # reads versioned capsules 1.0 to 1.3 (measured)
    notes=("imports always copy (mx.from_dlpack on CPU); exports are zero-copy",),
)


def _mx() -> Any:
    import mlx.core

    return mlx.core


def _mx_dtype(name: str) -> Any:
    try:
        return getattr(_mx(), MLX_DTYPES[name])
    except KeyError:
        raise UnsupportedDTypeError(f"MLX has no {name} arrays") from None


class MLXAdapter(Adapter, Devices, Testing):
    name = "mlx"
    modules = ("mlx",)
    distributions = ("mlx",)
    contract = (2, 0)

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["mlx.core"].array,)

    device_examples = ("mlx.core.cpu", "mlx.core.Device(mlx.core.gpu, 0)")

    def parse_device(self, device: Any) -> Device | None:
        """An MLX device (mx.cpu, mx.gpu, mx.Device(mx.gpu, 1), mx.default_device()) as the
        DLPack device it names: MLX's GPU is Metal on macOS and CUDA elsewhere."""
        mx = sys.modules.get("mlx.core")
        if mx is None:
            return None
        if isinstance(device, mx.DeviceType):
            device = mx.Device(device)
        if not isinstance(device, mx.Device):
            return None
        if device.type == mx.cpu:
            return CPU
        index = re.search(r"(\d+)\)$", repr(device))  # "Device(gpu, 1)": no attribute says it
        return Device(
            "metal" if sys.platform == "darwin" else "cuda", int(index[1]) if index else 0
        )

    def capabilities(self) -> Capabilities:
        return CAPS

    def from_dlpack(self, source: ExchangeObject) -> Any:
        mx = _mx()
        info = source.info
        if 0 in info.shape:
            # Nothing to copy, and an MLX array imported from an empty float16 capsule hung
            # its first kernel (x + x, sum) here: made by MLX itself, the capsule released.
            source.release()
            return mx.zeros(info.shape, dtype=_mx_dtype(info.dtype))
        # mx.from_dlpack would narrow float64 to float32: carry its bits as uint64
        dtype = "uint64" if info.dtype == "float64" else info.dtype
        if any(stride < 0 for stride in info.strides):
            # Left only on size-1 dimensions or without elements (reversed views are copied
            # first), where MLX still refuses them: the same memory with those strides made
            # positive, the original capsule kept alive (and released) by the new one.
            capsule = capsule_over(
                info.data,
                info.shape,
                tuple(abs(stride) for stride in info.strides),
                dtype,
                source.take(),
                device=(info.device.type, info.device.id),
                read_only=info.read_only,
                byte_offset=info.byte_offset,
            )
        else:
            if dtype != info.dtype:
                source.retag(dtype)
            capsule = source.take()
        result = mx.from_dlpack(capsule)
        return result.view(mx.float64) if dtype != info.dtype else result

    def copy(self, x: Any) -> Any:
        mx = _mx()
        # mx.array copies but keeps the layout, mx.contiguous copies only what is not row
        # contiguous, and both keep odd strides on size-1 dimensions: a flat view reshaped
        # gives the fresh copy canonical strides (MXNet takes nothing else)
        fresh = mx.array(x) if memoryview(x).c_contiguous else mx.contiguous(x)
        return fresh.flatten().reshape(x.shape)

    # --- for the conformance kit: MLX's own API only -----------------------------------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        mx = _mx()
        _mx_dtype(dtype)  # MLX cannot make dtypes it does not have
        return build_sample(
            dtype,
            shape,
            lambda values, name: mx.array(values, dtype=_mx_dtype(name)).reshape(shape),
            lambda x, name: x.astype(_mx_dtype(name)),
        )

    def views(self, x: Any) -> dict[str, Any]:
        return indexed_views(x)  # x.T, x[..., ::2], x[1:], x[::-1]: MLX views, no copies

    def to_bytes(self, x: Any) -> bytes:
        return memoryview(x).tobytes()  # MLX's buffer protocol, in row-major order

    def data_address(self, x: Any) -> int:
        """The first element's address as MLX's buffer protocol reports it (Py_buffer.buf)."""
        return buffer_address(memoryview(x))

    def mutate(self, x: Any) -> bool:
        return False  # x[i] = v rebinds x to a new array: MLX never writes an array in place

    def array_namespace(self) -> Any:
        return _mx()

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        mx = _mx()
        if x.dtype == mx.bool_:
            doubled, total = mx.logical_not(x), mx.sum(x)
        else:
            doubled, total = x + x, mx.sum(x)
        mx.eval(doubled, total)  # MLX is lazy: run both kernels now
        return doubled, total
