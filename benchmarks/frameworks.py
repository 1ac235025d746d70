"""The table of direct routes: how each framework makes, exports and imports DLPack tensors.

This is the only framework-specific code of the suite. For every framework it says, with the
framework's own APIs only:

- how to make a contiguous float32 tensor of n elements (64-byte aligned, its values ready);
- which DLPack sources it produces (the tensor itself as an object with `__dlpack__`, legacy
  or versioned capsules) and which its importers consume;
- where it has them, a non-compact view, a read-only tensor and a compact copy (for the forced
  copy cases), and zero-copy routes that are not DLPack (`torch.from_numpy`, ...).

A direct route for a pair is a consumer of the target fed by a producer of the source of the
same kind. Routes are Python expressions in `x` (the source tensor); the timing loop runs them
inline, exactly as written (no wrapper call), so the library and the direct routes pay the
same loop cost. Deep attribute chains are bound once to short names (shown in `label`), as a
user who cares about speed would do: the direct route is the fastest one the frameworks offer.
Capsules are single-use, so every call makes a fresh one: creating it counts on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .env import import_framework

OBJECT = "object"  # the consumer takes an object with __dlpack__ and calls it itself
LEGACY = "legacy capsule"  # a "dltensor" capsule
VERSIONED = "versioned capsule"  # a "dltensor_versioned" capsule (DLPack >= 1.0)
NATIVE = "native (not DLPack)"

ALIGN = 64  # bytes: JAX copies buffers that are not 64-byte aligned


@dataclass(frozen=True)
class Producer:
    kind: str
    code: str  # a template in {x}
    label: str = ""
    #: exports for reading only (MXNet's to_dlpack_for_read: the engine waits for pending
    #: writes, not reads): fed to an importer whose results are writable, not the reference
    read_only: bool = False


@dataclass(frozen=True)
class Consumer:
    kind: str
    code: str  # a template in {src}
    label: str = ""
    #: its results can be written whatever the capsule says (torch, Paddle, MXNet)
    writable: bool = False


@dataclass(frozen=True)
class Route:
    """One direct way of converting `x` from one framework into another."""

    label: str  # what a person reads
    code: str  # the expression timed, in `x`
    kind: str  # OBJECT, LEGACY, VERSIONED or NATIVE
    #: the consumer's own from_dlpack(obj) on the framework's tensor itself
    is_object: bool = False
    #: a fair reference for the library, which gives the same access: not a read-only
    #: export handed to an importer whose results are writable
    reference: bool = True

    @property
    def dlpack(self) -> bool:
        return self.kind != NATIVE


@dataclass
class Spec:
    """One framework, as the benchmarks drive it directly."""

    module: str
    names: dict[str, Any]  # the namespace route code runs in
    make: Callable[[int], Any]
    #: the framework's tensor as a DLPack object ("{x}" when it has __dlpack__ itself)
    obj: Producer
    producers: list[Producer]
    consumers: list[Consumer]
    #: a suffix making results ready (JAX is asynchronous: "{}.block_until_ready()")
    wait: str = "{}"
    strided: Callable[[int], Any] | None = None  # n elements, step-sliced (non-compact)
    read_only: Callable[[int], Any] | None = None  # n elements, not writable
    unaligned: Callable[[int], Any] | None = None  # n elements, address % 64 != 0
    copy: str | None = None  # a compact, writable, fresh copy of {x}
    native: dict[str, list[Producer]] = field(default_factory=dict)  # by target module
    #: wrappers a user writes where an importer rejects the tensor as an object
    wrappers: list[Producer] = field(default_factory=list)

    def waited(self, expr: str) -> str:
        return self.wait.format(expr)


def _label(p: Producer | Consumer) -> str:
    return p.label or p.code


def routes(src: Spec, dst: Spec, x: str = "x") -> list[Route]:
    """Every direct route from `src` into `dst`, applied to the expression `x`."""
    found: list[Route] = []
    for consumer in dst.consumers:
        producers = [src.obj, *src.wrappers] if consumer.kind == OBJECT else []
        producers += [p for p in src.producers if p.kind == consumer.kind]
        for producer in producers:
            code = consumer.code.format(src=producer.code.format(x=x))
            label = _label(consumer).format(src=_label(producer).format(x="x"))
            found.append(
                Route(
                    dst.waited(label),
                    dst.waited(code),
                    consumer.kind,
                    is_object=producer is src.obj and src.obj.code == "{x}",
                    reference=not (producer.read_only and consumer.writable),
                )
            )
    for producer in src.native.get(dst.module, []):
        found.append(
            Route(
                dst.waited(_label(producer).format(x="x")),
                dst.waited(producer.code.format(x=x)),
                NATIVE,
            )
        )
    return found


# --- the frameworks ---------------------------------------------------------------------------


def _numpy() -> Spec:
    np = import_framework("numpy")

    def aligned(n: int, offset: int = 0) -> Any:
        raw = np.empty(n * 4 + ALIGN + offset, np.uint8)
        start = -raw.ctypes.data % ALIGN + offset
        out = raw[start : start + n * 4].view(np.float32)
        out[...] = np.arange(n, dtype=np.float32)
        return out

    def strided(n: int) -> Any:
        return aligned(2 * n)[::2]

    def read_only(n: int) -> Any:
        out = aligned(n)
        out.flags.writeable = False
        return out

    def unaligned(n: int) -> Any:
        return aligned(n, offset=16)

    return Spec(
        "numpy",
        {"np": np},
        aligned,
        obj=Producer(OBJECT, "{x}"),
        producers=[
            Producer(LEGACY, "{x}.__dlpack__()"),
            Producer(VERSIONED, "{x}.__dlpack__(max_version=(1, 0))"),
        ],
        # np.from_dlpack makes a legacy capsule's memory read-only, but interop's NumPy results
        # of writable memory are writable (bridged): a read-only export is no fair reference
        consumers=[Consumer(OBJECT, "np.from_dlpack({src})", writable=True)],
        strided=strided,
        read_only=read_only,
        unaligned=unaligned,
        copy="{x}.copy()",
        native={"torch": [Producer(NATIVE, "torch.from_numpy({x})")]},
    )


def _torch() -> Spec:
    torch = import_framework("torch")
    from torch.utils.dlpack import to_dlpack

    return Spec(
        "torch",
        {"torch": torch, "torch_to_dlpack": to_dlpack},
        lambda n: torch.arange(n, dtype=torch.float32),
        obj=Producer(OBJECT, "{x}"),
        producers=[
            Producer(LEGACY, "{x}.__dlpack__()"),
            Producer(LEGACY, "torch_to_dlpack({x})", "torch.utils.dlpack.to_dlpack({x})"),
            Producer(VERSIONED, "{x}.__dlpack__(max_version=(1, 0))"),
        ],
        consumers=[
            Consumer(OBJECT, "torch.from_dlpack({src})", writable=True),
            Consumer(LEGACY, "torch.from_dlpack({src})", writable=True),
            Consumer(VERSIONED, "torch.from_dlpack({src})", writable=True),
        ],
        strided=lambda n: torch.arange(2 * n, dtype=torch.float32)[::2],
        copy="{x}.clone(memory_format=torch.contiguous_format)",
        native={"numpy": [Producer(NATIVE, "{x}.numpy()")]},
    )


def _jax() -> Spec:
    jax = import_framework("jax")
    jnp = import_framework("jax.numpy")
    from jax.dlpack import from_dlpack

    return Spec(
        "jax",
        {"jax": jax, "jnp": jnp, "jax_from_dlpack": from_dlpack},
        lambda n: jnp.arange(n, dtype=jnp.float32).block_until_ready(),
        obj=Producer(OBJECT, "{x}"),
        producers=[Producer(LEGACY, "{x}.__dlpack__()")],
        # JAX's importers take objects only (and ask them for legacy capsules).
        consumers=[
            Consumer(OBJECT, "jax_from_dlpack({src})", "jax.dlpack.from_dlpack({src})"),
            Consumer(OBJECT, "jnp.from_dlpack({src})"),
        ],
        wait="{}.block_until_ready()",
        copy="{x}.copy()",
        native={"numpy": [Producer(NATIVE, "np.asarray({x})")]},
    )


def _tensorflow() -> Spec:
    tf = import_framework("tensorflow")
    from tensorflow.experimental.dlpack import from_dlpack, to_dlpack

    return Spec(
        "tensorflow",
        {"tf": tf, "tf_to_dlpack": to_dlpack, "tf_from_dlpack": from_dlpack},
        lambda n: tf.range(n, dtype=tf.float32),
        obj=Producer(OBJECT, "{x}"),  # EagerTensor has __dlpack__ (tf.Variable has not)
        producers=[
            Producer(LEGACY, "tf_to_dlpack({x})", "tf.experimental.dlpack.to_dlpack({x})"),
            Producer(LEGACY, "{x}.__dlpack__()"),
        ],
        consumers=[
            Consumer(LEGACY, "tf_from_dlpack({src})", "tf.experimental.dlpack.from_dlpack({src})")
        ],
        copy="tf.raw_ops.DeepCopy(x={x})",
    )


def cpu_exporter(export: Callable[[Any], Any], doc: str) -> type:
    """A wrapper class giving a framework's capsule function the `__dlpack__` protocol."""

    class Export:
        __slots__ = ("x",)

        def __init__(self, x: Any) -> None:
            self.x = x

        def __dlpack__(self, **_: Any) -> Any:
            return export(self.x)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    Export.__doc__ = doc
    return Export


def _mxnet() -> Spec:
    mx = import_framework("mxnet")

    MxExport = cpu_exporter(
        mx.nd.to_dlpack_for_read,
        "What a user writes to hand an MXNet 1.x NDArray (no __dlpack__) to object importers.",
    )
    MxExportWrite = cpu_exporter(
        mx.nd.to_dlpack_for_write,
        "The same for an importer whose results may be written (pending reads finish first).",
    )

    def make(n: int) -> Any:
        out = mx.nd.arange(n, dtype="float32")
        out.wait_to_read()
        return out

    def copy(x: Any) -> Any:
        """MXNet's own copy, waited on (its engine runs it asynchronously)."""
        out = x.copy()
        out.wait_to_read()
        return out

    return Spec(
        "mxnet",
        {
            "mx": mx,
            "MxExport": MxExport,
            "MxExportWrite": MxExportWrite,
            "mx_to_dlpack": mx.nd.to_dlpack_for_read,
            "mx_to_dlpack_write": mx.nd.to_dlpack_for_write,
            "mx_from_dlpack": mx.nd.from_dlpack,
            "mx_copy": copy,
        },
        make,
        obj=Producer(OBJECT, "MxExport({x})", read_only=True),
        wrappers=[Producer(OBJECT, "MxExportWrite({x})")],
        producers=[
            Producer(LEGACY, "mx_to_dlpack({x})", "mx.nd.to_dlpack_for_read({x})", read_only=True),
            Producer(LEGACY, "mx_to_dlpack_write({x})", "mx.nd.to_dlpack_for_write({x})"),
        ],
        consumers=[
            Consumer(LEGACY, "mx_from_dlpack({src})", "mx.nd.from_dlpack({src})", writable=True)
        ],
        copy="mx_copy({x})",
    )


def _paddle() -> Spec:
    paddle = import_framework("paddle")
    from paddle.utils.dlpack import from_dlpack, to_dlpack

    PaddleExport = cpu_exporter(
        to_dlpack, "For importers that reject Paddle's __dlpack_device__ (JAX: `(kDLCPU, None)`)."
    )

    consumers = [
        Consumer(
            kind, "pd_from_dlpack({src})", "paddle.utils.dlpack.from_dlpack({src})", writable=True
        )
        for kind in (OBJECT, LEGACY, VERSIONED)
    ]
    if hasattr(paddle, "from_dlpack"):
        consumers.insert(1, Consumer(OBJECT, "paddle.from_dlpack({src})", writable=True))
    return Spec(
        "paddle",
        {
            "paddle": paddle,
            "pd_to_dlpack": to_dlpack,
            "pd_from_dlpack": from_dlpack,
            "PaddleExport": PaddleExport,
        },
        lambda n: paddle.arange(n, dtype="float32"),
        obj=Producer(OBJECT, "{x}"),
        producers=[
            Producer(LEGACY, "pd_to_dlpack({x})", "paddle.utils.dlpack.to_dlpack({x})"),
            Producer(LEGACY, "{x}.__dlpack__()"),
            Producer(VERSIONED, "{x}.__dlpack__(max_version=(1, 0))"),
        ],
        consumers=consumers,
        copy="{x}.clone()",
        wrappers=[Producer(OBJECT, "PaddleExport({x})")],
    )


def _cupy() -> Spec:
    cp = import_framework("cupy")

    def make(n: int) -> Any:
        out = cp.arange(n, dtype=cp.float32)
        cp.cuda.get_current_stream().synchronize()
        return out

    return Spec(
        "cupy",
        {"cp": cp},
        make,
        obj=Producer(OBJECT, "{x}"),
        producers=[
            Producer(LEGACY, "{x}.toDlpack()"),
            Producer(VERSIONED, "{x}.__dlpack__(max_version=(1, 0))"),
        ],
        consumers=[Consumer(OBJECT, "cp.from_dlpack({src})", writable=True)],
        strided=lambda n: cp.arange(2 * n, dtype=cp.float32)[::2],
        copy="{x}.copy()",
    )


#: framework top-level module -> how to build its spec (imports the framework)
SPECS: dict[str, Callable[[], Spec]] = {
    "numpy": _numpy,
    "torch": _torch,
    "jax": _jax,
    "tensorflow": _tensorflow,
    "mxnet": _mxnet,
    "paddle": _paddle,
    "cupy": _cupy,
}


def spec_for(module: str) -> Spec | None:
    """The spec of a framework module, or None when the table has no entry for it."""
    build = SPECS.get(module)
    return build() if build else None
