"""JAX adapter: legacy capsules both ways, compact and transposed layouts, 64-byte alignment.

JAX arrays are immutable by API but their exports carry no READ_ONLY flag: they are shared
zero-copy (as the frameworks themselves do), `explain` says the result aliases an immutable
buffer, and NumPy receives them read-only. JAX's importer refuses step slices, stride 0 and
negative strides (those are copied at the source) and copies unaligned buffers by itself,
asynchronously: this adapter waits for that copy, so the source may change or go right after.
With `jax_enable_x64` off JAX silently narrows 64-bit input; such tensors are refused instead.
Before jax/jaxlib 0.5.1 every JAX kernel fails on a zero-copy import of a transposed buffer
("Unexpected XLA layout override"): there such buffers are copied compact at the source.
Tested with jax/jaxlib 0.10 on CPU, and 0.4.35 (the lowest supported) in `tox -e jax-min`.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from interop import (
    Adapter,
    Capabilities,
    Device,
    DeviceError,
    TensorInfo,
    UnsupportedDTypeError,
    UnsupportedTensorError,
    inspect,
)
from interop.adapter import DLPACK_LEGACY, IMMUTABLE, OBJECT_LEGACY
from interop.info import CANONICAL, CONTIGUOUS, PERMUTED
from interop.roles import (
    Devices,
    FastPath,
    Gradients,
    ImportRefusals,
    PytreeNodes,
    ShardedArrays,
    Sharding,
    Streams,
    Testing,
    TreeNodes,
)
from interop.samples import build_sample
from interop.versions import release

if TYPE_CHECKING:
    from interop.grad import Source, Target

NARROW = frozenset(
    "bool int8 int16 int32 uint8 uint16 uint32 float16 bfloat16 float32 complex64 "
    "float8_e3m4 float8_e4m3 float8_e4m3b11fnuz float8_e4m3fn float8_e4m3fnuz "
    "float8_e5m2 float8_e5m2fnuz float8_e8m0fnu".split()
)
#: only with jax_enable_x64; JAX narrows them to 32 bits (with a copy) otherwise
WIDE = frozenset("int64 uint64 float64 complex128".split())
# int2/int4/uint4 have no DLPack code in XLA, and float4 arrays fail to import: left out.


#: the first jax/jaxlib whose kernels take an imported transposed buffer (jax 0.5.0 refuses
#: jaxlib 0.5.1 and jax 0.5.1 jaxlib 0.5.0: the pair moved together). Before it, the array a
#: zero-copy import of a permuted buffer gives carries that layout (`major_to_minor` (1, 0) for
#: a 2-D transpose), and every computation on it (`x + x`, `jnp.sum`, any `jax.jit`) fails in
#: JAX: "AssertionError: Unexpected XLA layout override ... (User input layout)", XLA having
#: compiled it for the default layout. Measured with `jax.dlpack.from_dlpack` on 64-byte
#: aligned NumPy transposes (unaligned ones JAX copies compact, and they work): 0.4.35, 0.4.36
#: and 0.5.0 fail every case, 0.5.1, 0.5.2, 0.5.3, 0.6.0 and 0.10.2 none.
PERMUTED_IMPORT_FIXED = (0, 5, 1)
_PERMUTED_BROKEN = (
    f"jax/jaxlib < {'.'.join(map(str, PERMUTED_IMPORT_FIXED))}: permuted (transposed) buffers "
    "are copied compact first, as JAX's kernels fail on a zero-copy import of one"
)


def _caps(x64: bool, permuted: bool = True) -> Capabilities:
    layouts = {CANONICAL, CONTIGUOUS, PERMUTED} if permuted else {CANONICAL, CONTIGUOUS}
    x64_note = "jax_enable_x64 is " + ("on" if x64 else "off: 64-bit dtypes are refused")
    return Capabilities(
        # Without x64 no JAX array holds a 64-bit dtype; imports name the switch instead.
        export_dtypes=NARROW | WIDE if x64 else NARROW,
        import_dtypes=NARROW | WIDE,
        import_errors=(RuntimeError,),  # JaxRuntimeError: "unsupported DLPack complex width"
        exports=frozenset({DLPACK_LEGACY}),
        imports=frozenset({OBJECT_LEGACY}),
        import_layouts=frozenset(layouts),
        import_alignment=64,
        unaligned_import="copy",
        # On a GPU, XLA shares any buffer, but its kernels refuse one below 16 bytes ("Address
        # of buffer 1 must be a multiple of 10", jax 0.11.2 on an H200): copied first there.
        alignment_by_device=(("cuda", 16, "refuse"), ("rocm", 16, "refuse")),
        import_byte_offset=True,
        import_access=IMMUTABLE,
        immutable=True,
        # JAX aborts the process (std::bad_function_call) when it frees an array imported
        # from a capsule with a NULL deleter: such capsules are re-wrapped first.
        import_needs_deleter=True,
        volatile_dtypes=WIDE,  # their import depends on jax_enable_x64, which can change
        devices=frozenset({"cpu", "cuda", "rocm"}),
        notes=(x64_note,) if permuted else (x64_note, _PERMUTED_BROKEN),
    )


# Plans are cached by the identity of capabilities: one constant object per x64 state, and per
# whether the installed JAX shares permuted buffers (the _COMPACT ones: below 0.5.1).
CAPS_X64 = _caps(True)
CAPS_X32 = _caps(False)
CAPS_X64_COMPACT = _caps(True, permuted=False)
CAPS_X32_COMPACT = _caps(False, permuted=False)
_TRUE = ("1", "true", "t", "yes", "y", "on")


def installed_version() -> str | None:
    """The installed jaxlib's version (jax's where jaxlib has no metadata), read from the
    distribution metadata: JAX need not be imported."""
    for name in ("jaxlib", "jax"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def shares_permuted(version: str | None) -> bool:
    """Whether JAX at `version` can use a zero-copy import of a permuted buffer (unknown: yes,
    as current releases do)."""
    return version is None or release(version) >= PERMUTED_IMPORT_FIXED


@cache
def _caps_pair() -> tuple[Capabilities, Capabilities]:
    """(x64 on, x64 off) capabilities of the installed JAX, decided once per process."""
    if shares_permuted(installed_version()):
        return CAPS_X64, CAPS_X32
    return CAPS_X64_COMPACT, CAPS_X32_COMPACT


def x64_enabled() -> bool:
    """JAX's current jax_enable_x64 (its environment default while JAX is not imported)."""
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is not None:
        return bool(config.jax_enable_x64)
    return os.environ.get("JAX_ENABLE_X64", "").strip().lower() in _TRUE


#: the 32-bit dtype JAX holds instead of each 64-bit one while x64 is off
NARROWED = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}


def _x64_off(dtype: str) -> str:
    return (
        f"jax_enable_x64 is off, so JAX would silently narrow {dtype} to 32 bits; enable it "
        "with jax.config.update('jax_enable_x64', True) or JAX_ENABLE_X64=1"
    )


@cache
def _dtype_name(dtype: Any) -> str:
    return str(dtype.name)  # NumPy's dtype.name costs ~4 us a call; dtypes are few


@cache
def _types() -> tuple[type, ...]:
    """The concrete array type (ArrayImpl) first, then the abstract jax.Array."""
    jax = sys.modules["jax"]
    return (type(jax.numpy.zeros(())), jax.Array)


def _export(x: Any) -> Any:
    """The fast path's export where XLA's own is not the known one (a plain function: 40 ns
    less than a `methodcaller` on CPython 3.11)."""
    return x.__dlpack__()


@cache
def _fast_export() -> Callable[[Any], Any]:
    """The fast path's export of a one-device array: XLA's own, the call `__dlpack__()` ends
    in after ~1.7 us of Python (its device-set and copy checks; XLA's takes ~0.4 us), made as
    `__dlpack__` makes it: of the array's shard (`addressable_data(0)`, an array of its own
    over the same buffer), so the capsule holds that, not the caller's array. Exported from
    the array itself, `x.delete()` while a result lives aborts the process ("Check failed:
    holds_[i] == 0"). Arrays of any other sharding are refused, so they take the full path
    (shard by shard). Tried once on a small array before it is trusted (it must export that
    array's own buffer, through a shard that is not the array); `__dlpack__` itself where it
    differs or is missing."""
    try:
        import jax
        import jax.numpy as jnp
        from jax._src.lib import _jax

        to_capsule = partial(_jax.buffer_to_dlpack_managed_tensor, stream=None)
        single = jax.sharding.SingleDeviceSharding

        def export(x: Any) -> Any:
            # XLA's export takes a sharded array's first shard without a word: the route
            # (which checks the capsule, not the array) would hand that shard on as the whole
            if type(x.sharding) is not single:
                raise BufferError("not a one-device array: the full path converts it")
            # what addressable_data(0) gives a one-device array, without its Python frame
            return to_capsule(x._fully_replicated_shard())

        probe = jnp.arange(4, dtype=jnp.float32)
        info = inspect(export(probe))  # read, not consumed: the capsule frees it
        if (
            info.address != probe.unsafe_buffer_pointer()
            or info.shape != (4,)
            or probe._fully_replicated_shard() is probe
        ):
            return _export
    except Exception:  # another jaxlib: its private API is not ours to guess
        return _export
    return export


#: the jaxlib extension versions whose XLA import takes (capsule, device, stream, copy, type)
_XLA_IMPORT_VERSIONS = range(467, 10_000)


@cache
def _xla_cpu_import() -> Callable[[Any], Any] | None:
    """XLA's own import of a legacy CPU capsule onto cpu:0, the call `jax.dlpack.from_dlpack`
    ends in; None where this jaxlib's is not the one known (then the public call is used).

    On the CPU the public call spends most of its ~20 us asking the device for a stream (it
    raises UNIMPLEMENTED there: about 7 us) and re-wrapping the result with `jnp.asarray`
    (about 8 us, a no-op for the dtypes the fast path takes); XLA's import alone takes about
    4 us. It is tried once on a NumPy buffer before it is trusted: it must share the memory."""
    try:
        import jax
        import numpy as np
        from jax._src.lib import _jax, jaxlib_extension_version

        if jaxlib_extension_version not in _XLA_IMPORT_VERSIONS:
            return None
        device = jax.devices("cpu")[0]
        to_buffer = _jax.dlpack_managed_tensor_to_buffer

        def import_cpu(capsule: Any) -> Any:
            return to_buffer(capsule, device, None, None, 1)

        probe = np.empty(64 + 16, dtype=np.uint8)
        probe = probe[-probe.ctypes.data % 64 :][:16].view(np.float32)
        probe[:] = (1, 2, 3, 4)
        array = import_cpu(probe.__dlpack__())
        shared = array.unsafe_buffer_pointer() == probe.ctypes.data
        if not shared or np.asarray(array).tolist() != [1.0, 2.0, 3.0, 4.0]:
            return None
    except Exception:  # another jaxlib: its private API is not ours to guess
        return None
    return import_cpu


@cache
def _fast_import() -> Callable[[Any], Any]:
    """The fast path's importer (objects): XLA's import for CPU buffers where it is known,
    `jax.dlpack.from_dlpack` for the rest (GPU buffers need its stream hand-over)."""
    import jax.dlpack

    public = jax.dlpack.from_dlpack
    import_cpu = _xla_cpu_import()
    if import_cpu is None:
        return public

    def from_dlpack(source: Any) -> Any:
        if source.__dlpack_device__() != (1, 0):
            return public(source)
        return import_cpu(source.__dlpack__())

    return from_dlpack


class JaxAdapter(
    Adapter, FastPath, ImportRefusals, Devices, Streams, Testing, Sharding, Gradients, PytreeNodes
):
    name = "jax"
    modules = ("jax", "jaxlib")
    distributions = ("jax",)
    contract = (2, 0)  # 1.1: sharded(), grad_source(), grad_target(), tree_node()

    def tensor_types(self) -> tuple[type, ...]:
        return _types()

    def sharded(self) -> ShardedArrays:
        """jax.Arrays over a mesh (`interop_jax.sharding`), for `interop.sharding`."""
        from .sharding import HOOK

        return HOOK

    def grad_source(self) -> Source:
        """Functions written with JAX can be wrapped (`interop_jax.grad`)."""
        from .grad import SOURCE

        return SOURCE

    def grad_target(self) -> Target:
        """Wrapped functions can be called with JAX tensors and differentiated by its
        autodiff (`interop_jax.grad`)."""
        from .grad import TARGET

        return TARGET

    def tree_node(self) -> TreeNodes:
        """The containers JAX's pytree registry knows, for `convert_tree`
        (`interop_jax.pytree`)."""
        from .pytree import node

        return node

    def capabilities(self) -> Capabilities:
        x64, x32 = _caps_pair()
        return x64 if x64_enabled() else x32

    def refusal(self, info: TensorInfo) -> str | None:
        if info.dtype in WIDE and not x64_enabled():
            narrow = NARROWED[info.dtype]
            return (
                f"{_x64_off(info.dtype)}, or have interop narrow it, checked: "
                f"dtypes={{{info.dtype!r}: {narrow!r}}} (a value that does not fit is a "
                "CastError naming it)"
            )
        return None

    def _devices(self, device: Device) -> list[Any]:
        import jax

        try:
            return list(jax.devices("cpu" if device.type == "cpu" else "gpu"))
        except RuntimeError:  # no backend of that kind
            return []

    device_examples = ("jax.devices()[0]",)

    def parse_device(self, device: Any) -> Device | None:
        """A jax Device as the DLPack device it names: its place among JAX's devices of its
        platform, the ordinal `to_device` reads back (JAX's CPU devices all hold host
        memory; more than one exists only with --xla_force_host_platform_device_count)."""
        jax = sys.modules["jax"]
        if not isinstance(device, jax.Device):
            return None
        platform = device.platform
        if platform == "gpu":  # what jax.devices("gpu") lists: CUDA or ROCm
            version = str(getattr(device.client, "platform_version", "")).lower()
            platform = "rocm" if "rocm" in version else "cuda"
        elif platform != "cpu":
            raise DeviceError(
                f"{device!r} is a {device.platform} device, whose memory DLPack cannot reach; "
                "use a cpu or gpu device of JAX's"
            )
        found = self._devices(Device(platform))
        index = found.index(device) if device in found else device.id
        return Device(platform, index)

    def device_unavailable(self, device: Device) -> str | None:
        if device.type == "cpu" and device.id == 0:
            return None  # every jaxlib has a CPU backend: no need to import JAX to say so
        found = self._devices(device)
        if device.id >= len(found):
            return f"jax sees {len(found)} {device.type} device(s), not {device}"
        return None

    def consumer_stream(self, device: Device) -> Any:
        """The stream JAX's own importer hands producers: the device's stream for external
        ready events (jax/_src/dlpack.py), so the producer orders its work before JAX reads."""
        if device.type == "cpu" or self.device_unavailable(device):
            return None
        try:
            return self._devices(device)[device.id].get_stream_for_external_ready_events()
        except Exception:  # UNIMPLEMENTED on some backends: no stream, as JAX itself does
            return None

    def to_device(self, x: Any, device: Device) -> Any:
        import jax

        return jax.device_put(x, self._devices(device)[device.id]).block_until_ready()

    def export(self, x: Any, *, writable: bool = False) -> Any:
        import jax

        if isinstance(x, jax.core.Tracer):
            raise UnsupportedTensorError(
                f"cannot convert a traced JAX value ({type(x).__name__}): inside jit, grad or "
                "vmap it has no memory yet; convert the result outside the transformation"
            )
        if x.is_deleted():
            raise UnsupportedTensorError("cannot convert a deleted (donated) JAX array")
        if len(x.sharding.device_set) != 1:
            raise UnsupportedTensorError(
                f"cannot convert a JAX array sharded over {len(x.sharding.device_set)} devices: "
                "DLPack describes one buffer; gather it or convert each shard"
            )
        dtype = _dtype_name(x.dtype)
        if dtype not in NARROW | WIDE:
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # a typed PRNG key array
                raise UnsupportedDTypeError(
                    f"jax cannot export a {dtype} array (random keys) through DLPack; convert "
                    "jax.random.key_data(x) instead (the keys' raw uint32 words)"
                )
            raise UnsupportedDTypeError(f"jax cannot export a {dtype} array through DLPack")
        return x

    # --- the fast path ---------------------------------------------------------------------
    def fingerprint(self, x: Any) -> Any:
        """(dtype, sharding, has size-1 extents) of a concrete array with elements: its sharding
        names its one device, and JAX exports its buffers in their default (row-major) layout.
        Empty arrays take the full path (their exported strides vary with the shape)."""
        shape = x.shape
        if 0 in shape:
            return None
        return (x.dtype, x.sharding, 1 in shape)

    def fast_address(self, x: Any) -> int:
        return int(x.unsafe_buffer_pointer())

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        return None if versioned else _fast_export()

    def importer(self, as_object: bool, dtype: str) -> Any:
        return _fast_import() if as_object else None

    def from_dlpack(self, source: Any) -> Any:
        import jax.dlpack

        # An unaligned buffer is copied asynchronously: wait, or later writes to the source
        # would leak into the copy.
        return jax.dlpack.from_dlpack(source).block_until_ready()

    def copy(self, x: Any) -> Any:
        import jax.numpy as jnp

        # jax.dlpack.from_dlpack(copy=True) aliases on CPU; jnp.array(copy=True) really copies.
        return jnp.array(x, copy=True)

    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        import jax.numpy as jnp

        if dtype in WIDE and not x64_enabled():
            raise UnsupportedDTypeError(f"jax cannot make a {dtype} array: {_x64_off(dtype)}")
        return build_sample(
            dtype,
            shape,
            lambda v, d: jnp.array(v, dtype=d).reshape(shape),
            lambda x, d: x.astype(d),
        )

    def to_bytes(self, x: Any) -> bytes:
        import numpy as np

        return np.asarray(x).tobytes(order="C")

    def data_address(self, x: Any) -> int:
        return int(x.unsafe_buffer_pointer())

    def array_namespace(self) -> Any:
        import jax.numpy as jnp

        return jnp

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        import jax.numpy as jnp

        if x.dtype == jnp.bool_:
            return jnp.logical_not(x), jnp.count_nonzero(x)
        return x + x, jnp.sum(x)
