"""TensorFlow adapter: legacy capsules both ways through `tf.experimental.dlpack`, C order only.

`tf.Variable` has no `__dlpack__` and `to_dlpack` refuses it, so variables are exported
through `read_value()`, which shares the variable's buffer (measured: no copy). TensorFlow
tensors are immutable by API but their capsules carry no READ_ONLY flag: they are shared
zero-copy, `explain` says so, and NumPy receives them read-only. TensorFlow aborts the whole
process when asked to export a string tensor, so every dtype DLPack cannot carry (string,
float8, int4, quantized, resource, variant) is refused before `to_dlpack` is called. Its
importer takes only C-order strides and no byte_offset; other layouts are copied first.
Tested with tensorflow-cpu 2.21.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from interop import (
    Adapter,
    Capabilities,
    Device,
    DeviceError,
    UnsupportedDTypeError,
    UnsupportedTensorError,
)
from interop.adapter import CAPSULE, COMPACT_ONLY, IMMUTABLE
from interop.roles import Devices, ExportHazards, FastPath, Gradients, Testing
from interop.samples import build_sample

if TYPE_CHECKING:
    from interop.grad import Source, Target

DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
    "complex64 complex128".split()
)
# float8 types: TF can neither export nor import them ("Unsupported Type Codes: 10/12");
# int4/uint4: TF cannot export them ("... is not supported by dlpack").

CAPS = Capabilities(
    export_dtypes=DTYPES,
    import_dtypes=DTYPES,
    exports=frozenset({CAPSULE}),
    imports=frozenset({CAPSULE}),
    import_layouts=COMPACT_ONLY,
    import_byte_offset=False,
    # TF's kernels abort the process (Check failed: IsAligned()) on buffers that are not
    # 64-byte aligned, although from_dlpack takes them: such buffers are copied first.
    import_alignment=64,
    unaligned_import="refuse",
    import_access=IMMUTABLE,
    immutable=True,
    copy_through_numpy=True,  # a NumPy copy of its memory: 1.6-1.9x DeepCopy here
)


@cache
def _types() -> tuple[type, ...]:
    """Eager tensors (the type of every concrete tensor), then tf.Tensor and tf.Variable."""
    tf = sys.modules["tensorflow"]
    found = (type(tf.constant(0)), tf.Tensor, tf.Variable)
    _EAGER[:] = found[:1]
    return found


#: the eager tensor type, once TensorFlow is imported (read on the fast path)
_EAGER: list[type] = [type(None)]


@cache
def _fast_import() -> Callable[[Any], Any]:
    """The fast path's importer: TensorFlow's own C import with the eager context's handle,
    read from the context where it is kept. `tf.experimental.dlpack.from_dlpack` does the same
    after three Python calls (context(), ensure_initialized(), the _handle property), about
    0.25 us of a 0.8 us conversion. Before the context exists, and in a TensorFlow that keeps
    it elsewhere, the public call runs. (Asked for by the first plan into TensorFlow, which is
    made before its import step imports it.)"""
    import tensorflow as tf

    public = tf.experimental.dlpack.from_dlpack
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import context

        to_tensor = pywrap_tfe.TFE_FromDlpackCapsule
        getattr(context, "_context")  # noqa: B009 (the attribute must exist, even if None)
    except (ImportError, AttributeError):
        return public

    def from_dlpack(capsule: Any) -> Any:
        handle = getattr(context._context, "_context_handle", None)
        if handle is None:  # not initialised yet (or kept elsewhere): TF's own call does it
            return public(capsule)
        return to_tensor(capsule, handle)

    return from_dlpack


@cache
def _fast_export() -> Callable[[Any], Any]:
    """The fast path's exporter: the C call `tf.experimental.dlpack.to_dlpack` passes its
    argument to and nothing else (0.34 against 0.45 us); the public call where it is not."""
    tf = sys.modules["tensorflow"]
    try:
        from tensorflow.python import pywrap_tfe

        export: Callable[[Any], Any] = pywrap_tfe.TFE_ToDlpackCapsule
    except (ImportError, AttributeError):
        export = tf.experimental.dlpack.to_dlpack
    return export


#: TensorFlow's device types with DLPack memory, by the DLPack device each names
TF_DEVICES = {"CPU": "cpu", "GPU": "cuda"}


class TensorflowAdapter(Adapter, FastPath, ExportHazards, Devices, Testing, Gradients):
    name = "tensorflow"
    aliases = ("tf",)
    modules = ("tensorflow",)
    distributions = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly")
    contract = (2, 0)  # 1.1: grad_source(), grad_target()

    def tensor_types(self) -> tuple[type, ...]:
        return _types()

    device_examples = ("'/device:GPU:0'", "tf.config.list_logical_devices()[0]")

    def parse_device(self, device: Any) -> Device | None:
        """A TensorFlow device name ("/device:CPU:0", "/CPU:0", a tensor's `.device`) or a
        PhysicalDevice/LogicalDevice as the DLPack device it names."""
        if type(device).__module__.startswith("tensorflow.") and hasattr(device, "device_type"):
            # a PhysicalDevice or LogicalDevice (named tuples): "/physical_device:CPU:0"
            device = f"/device:{device.device_type}:{device.name.rpartition(':')[2]}"
        if not isinstance(device, str) or ("/" not in device and ":" not in device):
            return None
        tf = sys.modules["tensorflow"]
        try:
            spec = tf.DeviceSpec.from_string(device)
        except ValueError:
            return None  # not TensorFlow's spelling either
        if not spec.device_type:
            return None  # "/job:worker" names no device
        kind = TF_DEVICES.get(spec.device_type.upper())
        if kind is None:
            raise DeviceError(
                f"{device!r} names a {spec.device_type} device, which DLPack cannot reach; use "
                "a CPU or GPU device ('/device:GPU:0')"
            )
        if kind == "cuda" and tf.test.is_built_with_rocm():
            kind = "rocm"
        return Device(kind, spec.device_index or 0)

    def alias_hazard(self, x: Any) -> str:
        if x.shape.num_elements() == 1:
            return (
                "TensorFlow hands out one buffer for all equal scalar constants (tf.constant(1.0) "
                "is cached process-wide), so a writable alias of a one-element tensor could "
                "change them all"
            )
        return ""

    # --- the fast path ---------------------------------------------------------------------
    #: TF's DataType enums (stable protobuf numbers) of the dtypes above: exporting any other
    #: (a string tensor) aborts the process, so the compiled path checks before exporting
    route_guards = (
        ("_datatype_enum", frozenset({1, 2, 3, 4, 5, 6, 8, 9, 10, 14, 17, 18, 19, 22, 23})),
    )

    def fingerprint(self, x: Any) -> Any:
        """(dtype, one element or more, device) of an eager tensor with elements: TF exports
        row-major buffers only. Empty tensors take the full path (their strides vary)."""
        if type(x) is not _EAGER[0]:
            return None
        count = x._num_elements()
        if not count:
            return None
        return (x._datatype_enum(), count == 1, x.backing_device)

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        return None if versioned else _fast_export()

    def importer(self, as_object: bool, dtype: str) -> Any:
        return None if as_object else _fast_import()

    def grad_source(self) -> Source:
        """Functions written with TensorFlow can be wrapped (`interop_tensorflow.grad`)."""
        from .grad import SOURCE

        return SOURCE

    def grad_target(self) -> Target:
        """Wrapped functions can be called with TensorFlow tensors and differentiated by its
        autodiff (`interop_tensorflow.grad`)."""
        from .grad import TARGET

        return TARGET

    def capabilities(self) -> Capabilities:
        return CAPS

    def _value(self, x: Any) -> Any:
        """The eager tensor holding `x`'s memory (a variable's current buffer, shared)."""
        import tensorflow as tf

        value = x.read_value() if isinstance(x, tf.Variable) else x
        if tf.is_symbolic_tensor(value):
            raise UnsupportedTensorError(
                f"cannot convert the symbolic TensorFlow tensor {getattr(x, 'name', '')!r}: "
                "inside tf.function it has no memory; convert eager tensors only"
            )
        return value

    def export(self, x: Any, *, writable: bool = False) -> Any:
        import tensorflow as tf

        dtype = x.dtype.name
        if dtype not in DTYPES:
            why = (
                "TensorFlow aborts the process when asked to export one; read it with x.numpy() "
                "(a NumPy array of bytes objects) instead"
                if dtype == "string"
                else "DLPack cannot carry it; cast it first with tf.cast"
            )
            raise UnsupportedDTypeError(
                f"tensorflow cannot export a {dtype} tensor through DLPack: {why} "
                f"(it exports {', '.join(sorted(DTYPES))})"
            )
        return tf.experimental.dlpack.to_dlpack(self._value(x))

    def from_dlpack(self, source: Any) -> Any:
        import tensorflow as tf

        return tf.experimental.dlpack.from_dlpack(source)

    def copy(self, x: Any) -> Any:
        import tensorflow as tf

        # tf.identity returns the same buffer; DeepCopy allocates a fresh one.
        return tf.raw_ops.DeepCopy(x=self._value(x))

    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        import tensorflow as tf

        return build_sample(
            dtype,
            shape,
            lambda v, d: tf.constant(v, getattr(tf, d), shape=shape),
            lambda x, d: tf.cast(x, getattr(tf, d)),
        )

    def to_bytes(self, x: Any) -> bytes:
        import numpy as np

        return np.asarray(x.numpy()).tobytes(order="C")

    def data_address(self, x: Any) -> int:
        import numpy as np
        import tensorflow as tf

        # TF has no pointer API. np.asarray of a CPU eager tensor is a read-only view of its
        # buffer (measured: the address of its DLPack export, for every dtype and alignment),
        # except for 0-d bfloat16 ones (a scalar comes back), so view it flat: tf.reshape shares
        # the buffer. .numpy() copies, and so does np.asarray(variable): read its value first.
        flat = tf.reshape(self._value(x), [-1])
        return int(np.asarray(flat).__array_interface__["data"][0])

    def array_namespace(self) -> Any:
        import tensorflow as tf

        return tf.experimental.numpy

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        import tensorflow as tf

        value = self._value(x)
        if value.dtype == tf.bool:
            return tf.logical_not(value), tf.math.count_nonzero(value)
        if value.dtype.name not in DTYPES:
            return None
        return tf.add(value, value), tf.reduce_sum(value)
