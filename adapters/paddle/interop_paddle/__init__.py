"""PaddlePaddle adapter: versioned capsules out, both capsule kinds in, CPU, measured on 3.3.1.

Written as a third-party plugin, against the public contract only. Paddle's gaps, found by
measurement (see docs/frameworks/paddle.md) and declared as data so the core routes around
them: its importer ignores READ_ONLY (read-only memory is copied first) and `byte_offset`
(tensors with one are copied first), and accepts negative strides but then reads outside the
buffer (negative layouts are copied first). It cannot import fnuz/e8m0/e3m4/e4m3 float8 or
sub-byte dtypes. It calls a producer's deleter only when `manager_ctx` is not NULL, so such
capsules are re-wrapped (`interop.capsule.with_manager_ctx`). Importing paddle after
TensorFlow segfaults (their C++ protobuf runtimes clash), so the adapter imports paddle with
RTLD_DEEPBIND when it must.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from functools import cache
from types import ModuleType
from typing import Any

from interop import Adapter, Capabilities, Device, DeviceError, UnsupportedTensorError
from interop.adapter import (
    C_EXCHANGE_API,
    CAPSULE,
    CAPSULE_VERSIONED,
    DLPACK,
    OBJECT,
    WRITABLE,
)
from interop.capsule import flush_deferred, is_capsule, with_manager_ctx
from interop.info import BROADCAST, CANONICAL, CONTIGUOUS, CPU, PERMUTED, STRIDED, canonical_strides
from interop.roles import Devices, ExportHazards, FastPath, Streams, Testing
from interop.samples import build_sample, sample_values

#: every dtype Paddle holds and carries through DLPack both ways, bit for bit (measured)
DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex64 complex128 float8_e4m3fn float8_e5m2".split()
)
# Not importable (Paddle raises "DLDataType code <N> is illegal"): float8_e3m4, float8_e4m3,
# float8_e4m3b11fnuz, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, and sub-byte types.

#: dtypes Paddle stores but has no CPU kernels for (no clone, slice, reshape or set_value)
KERNEL_LESS = ("uint16", "uint32", "uint64")

CAPS = Capabilities(
    export_dtypes=DTYPES,
    import_dtypes=DTYPES,
    import_errors=(NotImplementedError,),  # paddle.from_dlpack: "(Unimplemented) ..."
    max_ndim=9,  # paddle.from_dlpack of 10 dimensions: "Invalid dimension to be accessed"
    exports=frozenset({DLPACK, C_EXCHANGE_API}),
    imports=frozenset({CAPSULE, CAPSULE_VERSIONED, OBJECT}),
    devices=frozenset({"cpu"}),
    # Negative strides are taken, then read outside the buffer: never hand them over.
    import_layouts=frozenset({CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST}),
    import_byte_offset=False,
    import_access=WRITABLE,
    import_needs_manager_ctx=True,  # it frees a capsule only when manager_ctx is set
    # freeing an import runs its deleter under a lock its own exports' deleters take again:
    # Paddle memory that comes back through NumPy deadlocked when freed (Paddle 3.3)
    frees_under_lock=True,
    # it files an import's deleter under the data address, one per address: a second import
    # of memory it holds replaced the first's deleter, which never ran (Paddle 3.3)
    one_import_per_address=True,
    dlpack_version=(1, 3),
    dtype_notes={
        **{
            dtype: f"Paddle holds {dtype} but has no CPU kernels for {dtype} beyond astype and "
            f"numpy(): copying, reshaping, slicing and arithmetic fail (cast with astype first)"
            + ("; it prints the dtype as paddle.bfloat16" if dtype == "uint16" else "")
            for dtype in KERNEL_LESS
        },
        "bfloat16": "Paddle has only some CPU kernels for bfloat16: add, divide, mean, matmul, "
        "max, exp and tanh fail, while multiply, subtract, sum, reshape, slicing and astype "
        "work (cast with astype('float32') for the rest)",
    },
    notes=("ignores READ_ONLY and byte_offset; negative strides are copied first",),
)

# Typeinfo/vtable symbols of the C++ protobuf runtime. When a library loaded RTLD_GLOBAL
# (TensorFlow) put them in the global scope, libpaddle binds to that protobuf and crashes.
_PROTOBUF_SYMBOLS = ("_ZTIN6google8protobuf11MessageLiteE", "_ZTVN6google8protobuf7MessageE")
_IMPORT_LOCK = threading.Lock()


def _protobuf_in_global_scope() -> bool:
    try:
        scope = ctypes.CDLL(None)
    except OSError:  # pragma: no cover - platforms without dlopen(NULL)
        return False
    return any(hasattr(scope, symbol) for symbol in _PROTOBUF_SYMBOLS)


def import_paddle() -> ModuleType:
    """`import paddle`, also after TensorFlow (a plain import then segfaults in libpaddle).

    When another C++ protobuf runtime is in the global symbol scope, paddle's libraries are
    loaded with RTLD_DEEPBIND so that they bind to their own protobuf first.
    """
    module = sys.modules.get("paddle")
    if module is not None and not getattr(
        getattr(module, "__spec__", None), "_initializing", False
    ):
        return module  # (one another thread is still importing: the import below waits for it)
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    with _IMPORT_LOCK:
        if deepbind and "paddle" not in sys.modules and _protobuf_in_global_scope():
            flags = sys.getdlopenflags()
            sys.setdlopenflags(flags | deepbind)
            try:
                import paddle
            finally:
                sys.setdlopenflags(flags)
            return paddle
    import paddle

    return paddle


def _dunder_versioned(x: Any, _version: tuple[int, int] = CAPS.dlpack_version) -> Any:
    """`x.__dlpack__(max_version=...)`: a plain function costs 130 ns less than a
    `methodcaller` with a keyword on CPython 3.11."""
    return x.__dlpack__(max_version=_version)


@cache
def _host_only() -> bool:
    """Whether this Paddle holds tensors on the CPU alone: a build with no GPU, XPU or IPU and
    no custom device registered (plugins register when paddle is imported). The fast path
    then skips asking each tensor for its place (0.33 us, asked twice per conversion)."""
    paddle = import_paddle()
    builds = ("cuda", "rocm", "xpu", "ipu")
    if any(getattr(paddle, f"is_compiled_with_{b}", lambda: True)() for b in builds):
        return False
    all_types = getattr(paddle.device, "get_all_device_type", None)
    return all_types is not None and not all_types()


@cache
def _dtype_codes() -> dict[int, int]:
    """id of each of Paddle's dtype objects -> its int code. Paddle hands out one object per
    dtype: looking its id up costs 0.06 us, `x.dtype.value` 0.17 and hashing it 0.26. The
    objects are held here, so no other object can take their ids; one not found (were
    Paddle to make a new object per call) sends the tensor to the full path."""
    members = tuple(import_paddle().dtype.__members__.values())
    _dtype_codes.members = members  # type: ignore[attr-defined]  # (kept alive)
    return {id(member): int(member.value) for member in members}


# What the fast path reads of this Paddle, as globals: each cached call costs 0.05 us, and a
# conversion out of Paddle made three. Filled by the first fingerprint (Paddle is imported by
# then); until then `_HOST_ONLY` is False, which asks each tensor for its place: slower, true.
_CODES: dict[int, int] = {}
_HOST_ONLY = False


def _load_facts() -> dict[int, int]:
    global _HOST_ONLY
    _HOST_ONLY = _host_only()
    _CODES.update(_dtype_codes())
    return _CODES


def _export_versioned(x: Any) -> Any:
    """The fast path's versioned export: on the CPU, what `__dlpack__` returns once its checks
    (sparse, gradients, streams: the fingerprint's) are passed, in a quarter of its 2 us."""
    if _HOST_ONLY or x.place.is_cpu_place():
        return x.get_tensor()._to_dlpack_versioned()
    return _dunder_versioned(x)  # (streams to order: __dlpack__ does it)


def _export_legacy(x: Any) -> Any:
    """The legacy twin: `paddle.utils.dlpack.to_dlpack`'s own call, without its checks."""
    if _HOST_ONLY or x.place.is_cpu_place():
        return x.get_tensor()._to_dlpack()
    return import_paddle().utils.dlpack.to_dlpack(x)


@cache
def _fast_import() -> Any:
    """The fast path's import, or Paddle's public one where its pieces are not as probed.

    `paddle.from_dlpack` spends 5 of its 6.6 us making the tensor through the Python
    `Tensor.__init__` that Paddle installs over its C one (which it keeps as `original_init`,
    and which then runs alone for a DenseTensor and a place). This calls the same C
    import and the C `__init__` with the same arguments: 3.6 us. In static-graph mode
    `from_dlpack` returns the DenseTensor itself: the public call then."""
    paddle = import_paddle()
    tensor = paddle.Tensor
    init = getattr(tensor.__init__, "__globals__", {}).get("original_init")
    from_dlpack = getattr(paddle.base.core, "from_dlpack", None)
    in_dygraph = getattr(paddle.base.framework, "in_dygraph_mode", None)
    if (
        getattr(init, "__objclass__", None) is not tensor
        or getattr(init, "__name__", None) != "__init__"
        or from_dlpack is None
        or in_dygraph is None
    ):
        return paddle.from_dlpack
    new = tensor.__new__
    public = paddle.from_dlpack

    def import_capsule(capsule: Any) -> Any:
        if not in_dygraph():
            return public(capsule)
        dense = from_dlpack(capsule)
        out = new(tensor)
        init(out, dense, dense._place())
        return out

    return import_capsule


def _dtype_is(x: Any, names: tuple[str, ...]) -> bool:
    # Compare dtype objects: str(paddle.uint16) reads "paddle.bfloat16" in Paddle 3.3.
    paddle = sys.modules["paddle"]
    return any(x.dtype == getattr(paddle, name) for name in names)


class PaddleAdapter(Adapter, FastPath, ExportHazards, Devices, Streams, Testing):
    name = "paddle"
    aliases = ("paddlepaddle",)
    modules = ("paddle",)
    distributions = ("paddlepaddle", "paddlepaddle-gpu")
    contract = (2, 0)

    def import_framework(self) -> ModuleType:
        return import_paddle()

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["paddle"].Tensor,)

    def capabilities(self) -> Capabilities:
        return CAPS

    device_examples = ("paddle.CPUPlace()", "paddle.CUDAPlace(0)")

    def parse_device(self, device: Any) -> Device | None:
        """A paddle place (paddle.CPUPlace(), paddle.CUDAPlace(0), a tensor's `.place`) as the
        DLPack device it names."""
        paddle = sys.modules["paddle"]
        if not type(device).__module__.startswith("paddle.") or not hasattr(device, "is_cpu_place"):
            return None  # paddle's place types (their module moved across 2.x and 3.x)
        if device.is_cpu_place():
            return CPU
        if device.is_gpu_place():
            kind = "rocm" if paddle.is_compiled_with_rocm() else "cuda"
            return Device(kind, int(device.gpu_device_id()))
        if device.is_cuda_pinned_place():
            return Device("cuda_host", 0)
        raise DeviceError(
            f"{device} is a paddle place whose memory DLPack cannot reach; use "
            "paddle.CPUPlace() or paddle.CUDAPlace(n)"
        )

    def export_notes(self, x: Any) -> tuple[str, ...]:
        if not x.stop_gradient:
            return ("the tensor has stop_gradient=False: it is exported detached, gradients stop",)
        return ()

    def export(self, x: Any, *, writable: bool = False) -> Any:
        if x.is_sparse():
            raise UnsupportedTensorError(
                f"a sparse paddle tensor ({x.dtype}, shape {list(x.shape)}) has no DLPack form; "
                f"convert it with .to_dense() first"
            )
        return x if x.stop_gradient else x.detach()

    # --- the fast path ---------------------------------------------------------------------
    def fingerprint(self, x: Any) -> Any:
        """The dtype of a dense, contiguous CPU tensor with elements, cut off from autograd,
        whose strides are exactly row-major (those of extent-1 dimensions compared: a batch
        of one)."""
        if not x.stop_gradient or not x.is_dense() or not x.is_contiguous():
            return None
        shape = x.shape
        if 0 in shape or not (_HOST_ONLY or x.place.is_cpu_place()):
            return None
        if 1 in shape and tuple(x.strides) != canonical_strides(tuple(shape)):
            return None
        return (_CODES or _load_facts()).get(id(x.dtype))  # an int: hashing a dtype costs more

    def fast_address(self, x: Any) -> int:
        return x.data_ptr()

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        return _export_versioned if versioned else _export_legacy

    def importer(self, as_object: bool, dtype: str) -> Any:
        return None if as_object else _fast_import()

    def import_guard(self) -> Any:
        """Dynamic-graph mode: in static mode `from_dlpack` makes a DenseTensor, not a Tensor."""
        in_dygraph = getattr(import_paddle().base.framework, "in_dygraph_mode", None)
        return in_dygraph or (lambda: False)  # (not found: never through the exchange API)

    def from_dlpack(self, source: Any) -> Any:
        fast_import = _fast_import()  # (imports paddle)
        if not is_capsule(source):  # an object with __dlpack__
            source = source.__dlpack__(max_version=CAPS.dlpack_version)
        return fast_import(with_manager_ctx(source))

    def synchronize(self) -> None:
        """Wait for the releases the core defers out of Paddle's deleters (frees_under_lock)."""
        flush_deferred()

    def copy(self, x: Any) -> Any:
        paddle = import_paddle()
        if not x.stop_gradient:
            x = x.detach()
        if _dtype_is(x, KERNEL_LESS):  # no clone kernel: a cast there and back is exact
            return x.astype(paddle.int64).astype(x.dtype)
        return x.clone()  # never contiguous(): in Paddle it compacts x itself, in place

    # --- the conformance kit's hooks: Paddle's own API only ----------------------------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        paddle = import_paddle()
        target = getattr(paddle, dtype)
        if dtype in KERNEL_LESS:  # reshape has no kernel for them: shape first, then cast
            values = sample_values(dtype, shape)
            return paddle.to_tensor(values, dtype="int64").reshape(shape).astype(target)
        return build_sample(
            dtype,
            shape,
            lambda v, d: paddle.to_tensor(v, dtype=getattr(paddle, d)).reshape(shape),
            lambda x, d: x.astype(getattr(paddle, d)),
        )

    def views(self, x: Any) -> dict[str, Any]:
        makers = {
            "step-sliced": lambda: x[..., ::2],
            "offset": lambda: x[1:] if x.shape[0] > 1 else x[..., 1:],
            "negative": lambda: x[::-1],
        }
        if x.ndim >= 2:
            makers["transposed"] = lambda: x.mT
        found = {}
        for name, make in makers.items():
            try:
                found[name] = make()
            except RuntimeError:  # no slice kernel for this dtype (uint16/32/64)
                continue
        return found

    def to_bytes(self, x: Any) -> bytes:
        if x.size == 0:
            return b""
        # Not contiguous(): it would move x's own storage. numpy() misreads negative strides,
        # so a compact clone is read instead (uint16/32/64 have no clone kernel, nor such views).
        compact = x.detach() if _dtype_is(x, KERNEL_LESS) else x.detach().clone()
        return bytes(compact.numpy().tobytes())

    def data_address(self, x: Any) -> int:
        return int(x.data_ptr())

    def mutate(self, x: Any) -> bool:
        if _dtype_is(x, KERNEL_LESS):
            return False
        # fill_ on an indexed view: set_value has no float8 kernel and fails on some 0-d tensors
        (x[(0,) * x.ndim] if x.ndim else x).fill_(1)
        return True

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        paddle = import_paddle()
        if _dtype_is(x, (*KERNEL_LESS, "float8_e4m3fn", "float8_e5m2")):
            return None  # no arithmetic kernels for them on CPU
        if x.dtype == paddle.bool:
            return paddle.logical_not(x), paddle.count_nonzero(x)
        if _dtype_is(x, ("float16", "bfloat16")):
            return x * 2, paddle.sum(x)  # no add kernel for them on CPU; scaling doubles exactly
        return x + x, paddle.sum(x)
