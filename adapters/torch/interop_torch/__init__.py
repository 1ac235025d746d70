"""PyTorch adapter: both capsule kinds in, versioned capsules out, any strides but negative ones.

PyTorch cannot hold read-only memory (it ignores READ_ONLY and returns a writable alias), so
read-only sources are copied; it aborts the process on negative strides, so those are copied
too. Tensors that require grad are refused, as torch's own exports refuse them: a result
written in place would change the parameter behind autograd's back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from interop import Adapter, Capabilities, Device, DeviceError, UnsupportedTensorError, inspect
from interop.adapter import (
    C_EXCHANGE_API,
    CAPSULE,
    CAPSULE_VERSIONED,
    DLPACK,
    OBJECT,
    WRITABLE,
)
from interop.dlpack import MAX_VERSION
from interop.errors import typed
from interop.info import (
    BROADCAST,
    CANONICAL,
    CONTIGUOUS,
    PERMUTED,
    STRIDED,
    canonical_strides,
    classify_layout,
)
from interop.roles import (
    Devices,
    ExportHazards,
    FastPath,
    Gradients,
    PytreeNodes,
    ShardedArrays,
    Sharding,
    Streams,
    Testing,
    Tracing,
    TreeNodes,
)
from interop.samples import build_sample, indexed_views

if TYPE_CHECKING:
    from interop.grad import Source, Target

DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex64 complex128 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
    "float8_e8m0fnu".split()
)

CAPS = Capabilities(
    export_dtypes=DTYPES,
    import_dtypes=DTYPES,
    import_errors=(BufferError,),  # torch.from_dlpack: "Unsupported code 15"
    exports=frozenset({DLPACK, C_EXCHANGE_API}),
    imports=frozenset({CAPSULE, CAPSULE_VERSIONED, OBJECT}),
    devices=frozenset({"cpu", "cuda", "rocm"}),
    # torch.from_dlpack refuses a non-zero byte_offset ("Expected zero byte_offset").
    import_byte_offset=False,
    # Negative strides make torch.from_dlpack abort the process: never hand them over.
    import_layouts=frozenset({CANONICAL, CONTIGUOUS, PERMUTED, STRIDED, BROADCAST}),
    import_access=WRITABLE,
    dlpack_version=(1, 3),
    dtype_notes={
        dtype: f"torch has only some kernels for {dtype}: addition and max fail on CPU, while "
        f"multiplication, sum and .to() work (cast with .to() for the rest)"
        for dtype in ("uint16", "uint32", "uint64")
    },
)


def _torch() -> Any:
    return sys.modules["torch"]


@cache
def _exporters() -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(versioned, legacy) exports for the fast path: torch's own C calls, which
    `Tensor.__dlpack__` ends in after checks the route's guards and fingerprint make, tried
    once on a small tensor before they are trusted; the public `__dlpack__` where they are
    missing or differ (private names a torch release may change)."""
    torch = _torch()
    public = (partial(torch.Tensor.__dlpack__, max_version=MAX_VERSION), torch.Tensor.__dlpack__)
    try:
        private = (torch._C._to_dlpack_versioned, torch._C._to_dlpack)
        probe = torch.arange(4, dtype=torch.float32)
        for export, versioned in zip(private, (True, False), strict=True):
            info = inspect(export(probe))  # read, not consumed: the capsule frees it
            if (
                info.address != probe.data_ptr()
                or info.shape != (4,)
                or (info.version is not None) != versioned
            ):
                return public
    except Exception:  # another torch: its private API is not ours to guess
        return public
    return private


#: torch's device types with DLPack memory, by the DLPack device each names
TORCH_DEVICES = {"cpu": "cpu", "cuda": "cuda", "mps": "metal", "xpu": "oneapi"}


class TorchAdapter(
    Adapter,
    FastPath,
    ExportHazards,
    Tracing,
    Devices,
    Streams,
    Testing,
    Sharding,
    Gradients,
    PytreeNodes,
):
    name = "torch"
    aliases = ("pytorch",)
    modules = ("torch",)
    distributions = ("torch",)
    contract = (2, 0)  # 1.1: sharded(), grad_source(), grad_target(), tree_node()

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["torch"].Tensor,)

    def sharded(self) -> ShardedArrays:
        """DTensors (`interop_torch.sharding`), for `interop.sharding`."""
        from .sharding import HOOK

        return HOOK

    def grad_source(self) -> Source:
        """Functions written with torch can be wrapped (`interop_torch.grad`)."""
        from .grad import SOURCE

        return SOURCE

    def grad_target(self) -> Target:
        """Wrapped functions can be called with torch tensors and differentiated by its
        autodiff (`interop_torch.grad`)."""
        from .grad import TARGET

        return TARGET

    def tree_node(self) -> TreeNodes:
        """The containers torch's pytree registry knows, for `convert_tree`
        (`interop_torch.pytree`)."""
        from .pytree import node

        return node

    def capabilities(self) -> Capabilities:
        return CAPS

    def on_cpu(self, x: Any) -> bool:
        return bool(x.is_cpu)

    def tracer(self) -> str | None:
        """torch.compile while a compiled function runs: Dynamo traces the frames it enters,
        also those called eagerly at a graph break (where `is_compiling()` is False but its
        frame callback is set), so other adapters' probes must not run then."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            if torch.compiler.is_compiling():
                return "torch.compile"
            callback = torch._C._dynamo.eval_frame.get_eval_frame_callback()
        except (AttributeError, RuntimeError):  # a torch without Dynamo
            return None
        return "torch.compile" if callback not in (None, False) else None

    def export_hazard(self, x: Any) -> str:
        if x.is_neg() or x.is_conj():
            kind = "conjugated" if x.is_conj() else "negated"
            return (
                f"the torch tensor is a lazy {kind} view (is_{kind[:3]}()), whose DLPack export "
                "would drop the sign: it is resolved into a copy first"
            )
        return ""

    def export(self, x: Any, *, writable: bool = False) -> Any:
        # each refusal is also the BufferError torch's own export raises for the same tensor
        if x.is_meta:
            raise typed(UnsupportedTensorError, BufferError)(
                f"a torch meta tensor ({x.dtype}, shape {list(x.shape)}) has no data to convert: "
                "give it memory first, such as torch.empty_like(x, device='cpu') (uninitialised) "
                "or, for a model built on the meta device, model.to_empty(device='cpu') and "
                "then load its weights"
            )
        if x.is_nested:  # (its layout says strided; its export fails inside torch)
            raise typed(UnsupportedTensorError, BufferError)(
                "a torch nested tensor has no DLPack form (its components differ in shape); "
                "convert each of x.unbind(), or x.to_padded_tensor(0.0) (one padded tensor)"
            )
        if x.layout is not _torch().strided:
            raise typed(UnsupportedTensorError, BufferError)(
                f"a torch {x.layout} tensor has no DLPack form; convert x.to_dense() instead"
            )
        if x.is_quantized:
            raise typed(UnsupportedTensorError, BufferError)(
                f"a quantized torch tensor ({x.dtype}) has no DLPack form; convert "
                "x.dequantize() (its real values) or x.int_repr() (its stored integers) instead"
            )
        if x.requires_grad:  # (`.numpy()` raises RuntimeError for it, `__dlpack__` BufferError)
            raise typed(UnsupportedTensorError, BufferError, RuntimeError)(
                f"a torch tensor that requires grad ({x.dtype}, shape {list(x.shape)}) is not "
                "converted: a result written in place would change it behind autograd's back "
                "and gradients would come out wrong, so torch's own exports refuse it too; "
                "convert x.detach() for its values, or call a function written in another "
                "framework through interop.wrap(fn, source, 'torch') to carry gradients across"
            )
        if x.is_complex() and x.is_conj():
            raise typed(UnsupportedTensorError, BufferError)(
                "torch exports no tensor with the conjugate bit set (a lazy x.conj() view) "
                "through DLPack; convert x.resolve_conj() instead"
            )
        return x

    # --- the fast path ---------------------------------------------------------------------
    #: is_conj() asked of complex tensors only (DLPack code 5): torch refuses the bit on others;
    #: requires_grad read by its getter (torch's C-level exports do not refuse it)
    route_guards = (
        ("requires_grad", frozenset({False})),
        ("is_neg", frozenset({False})),
        ("is_conj", frozenset({False}), 5),
    )

    def fingerprint(self, x: Any) -> Any:
        """(dtype, device) of a plain tensor with elements whose strides are exactly row-major
        (torch calls a tensor contiguous whatever the strides of its extent-1 dimensions, a
        batch of one: those are compared); with its layout class besides for other strides
        (a transpose, a slice, channels_last: `classify_layout`, remembered per shape and
        strides). Lazy views, grad-tracking ones and ones whose storage was freed (FSDP's
        `resize_(0)`: no data, shape kept, which the plan refuses) take the full path."""
        dtype = x.dtype
        if x.requires_grad or x.is_neg():
            return None
        if dtype.is_complex and x.is_conj():  # only complex tensors carry the bit: 70 ns less
            return None
        shape = x.shape
        if 0 in shape or not x.data_ptr():
            return None
        key: Any = dtype
        if not x.is_contiguous() or (1 in shape and x.stride() != canonical_strides(shape)):
            key = (dtype, classify_layout(shape, x.stride()))
        return key if x.is_cpu else (key, x.device)  # (a torch.device costs 0.1 us)

    def fast_address(self, x: Any) -> int:
        return x.data_ptr()  # type: ignore[no-any-return]

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        return _exporters()[0 if versioned else 1]

    def importer(self, as_object: bool, dtype: str) -> Any:
        import torch  # the first plan into torch is made before its import step imports it

        if as_object:
            return torch.from_dlpack
        # what torch.from_dlpack calls for a capsule, without its Python frame and
        # `hasattr(capsule, "__dlpack__")`: 0.2 us of its 0.7 (torch 2.13, measured)
        return getattr(torch._C, "_from_dlpack", torch.from_dlpack)

    def from_dlpack(self, source: Any) -> Any:
        import torch

        return torch.from_dlpack(source)

    def copy(self, x: Any) -> Any:
        import torch

        # clone keeps a lazy conjugate bit; resolving materialises it (and the neg bit).
        # Sparse layouts have no memory format: they are cloned as they are.
        strided = x.layout == torch.strided
        fresh = (
            x.detach().clone(memory_format=torch.contiguous_format)
            if strided
            else x.detach().clone()
        )
        return fresh.resolve_conj().resolve_neg()

    device_examples = ("torch.device('cuda', 0)",)

    def parse_device(self, device: Any) -> Device | None:
        """A torch.device, or torch's spelling of one ("mps", "xpu:1": the core reads DLPack's
        names), as the DLPack device it names (an index left out: the current CUDA device, as
        torch reads it; ROCm builds name their GPUs "cuda" too)."""
        torch = sys.modules["torch"]
        if isinstance(device, str):
            try:
                device = torch.device(device)
            except (RuntimeError, ValueError):  # not torch's: another adapter's, or none
                return None
        if not isinstance(device, torch.device):
            return None
        if device.type == "meta":
            raise DeviceError(
                f"{device!r} holds no data (torch's 'meta' tensors have shapes and dtypes "
                "only): there is no memory to move a tensor to; ask for a device with memory, "
                "device='cpu' say"
            )
        kind = TORCH_DEVICES.get(device.type)
        if kind == "cuda" and torch.version.hip:
            kind = "rocm"
        if kind is None:
            raise DeviceError(
                f"{device!r} names no memory DLPack can reach (torch's {device.type!r} "
                f"device); use one of {', '.join(sorted(TORCH_DEVICES))}"
            )
        index = device.index
        if index is None:
            gpu = kind in ("cuda", "rocm") and torch.cuda.is_available()
            index = torch.cuda.current_device() if gpu else 0
        return Device(kind, index)

    def device_unavailable(self, device: Device) -> str | None:
        if device.type == "cpu":
            return super().device_unavailable(device)
        import torch

        if not torch.cuda.is_available():
            return f"this torch build ({torch.__version__}) sees no CUDA/ROCm device"
        if device.id >= torch.cuda.device_count():
            return f"torch sees {torch.cuda.device_count()} GPU(s), not device {device.id}"
        return None

    def to_device(self, x: Any, device: Device) -> Any:
        kind = "cuda" if device.type in ("cuda", "rocm") else device.type
        return x.detach().to(f"{kind}:{device.id}" if kind != "cpu" else "cpu", copy=True)

    def consumer_stream(self, device: Device) -> Any:
        import torch

        if device.type in ("cuda", "rocm") and torch.cuda.is_available():
            return torch.cuda.current_stream(device.id).cuda_stream
        return None

    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        import torch

        return build_sample(
            dtype,
            shape,
            lambda v, d: torch.tensor(v, dtype=getattr(torch, d)).reshape(shape),
            lambda x, d: x.to(getattr(torch, d)),
        )

    def views(self, x: Any) -> dict[str, Any]:
        return indexed_views(x, transpose="mT", negative=False)  # torch has no negative strides

    def to_bytes(self, x: Any) -> bytes:
        import torch

        if x.numel() == 0:
            return b""
        # a fresh 1-D buffer: contiguous() keeps odd strides on size-1 dimensions, which
        # view() then refuses
        flat = torch.empty(x.numel(), dtype=x.dtype)
        flat.copy_(x.detach().cpu().reshape(-1))
        return bytes(flat.view(torch.uint8).numpy().tobytes())

    def data_address(self, x: Any) -> int:
        return int(x.data_ptr())

    def mutate(self, x: Any) -> bool:
        with __import__("torch").no_grad():
            x[(0,) * x.dim()] = 1
        return True

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        import torch

        if x.dtype == torch.bool:
            return torch.logical_not(x), x.sum()
        if x.dtype.itemsize == 1 and x.dtype.is_floating_point:
            return None  # float8: no arithmetic kernels on CPU
        if x.dtype in (torch.uint16, torch.uint32, torch.uint64):
            if x.is_cuda:  # no add or mul kernels there either (torch 2.11): doubled in int64,
                # which wraps as the unsigned sum does
                return (x.to(torch.int64) * 2).to(x.dtype), x.sum()
            return x * 2, x.sum()  # no add kernel for them; mul doubles exactly
        return x + x, x.sum()
