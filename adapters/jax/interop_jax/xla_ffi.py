"""A bridged function called from `jax.jit` as an XLA custom call (typed FFI), no host callback.

Under a JAX transformation a wrapped function runs called back from XLA. `jax.pure_callback`
does that through JAX's host-callback machinery (about 0.5 ms a call on CPU); this module
instead registers one FFI handler (`_xla_ffi.c`) with XLA once per process, and lowers each call
to that custom call (the primitive `interop_jax_bridge`) with an int64 attribute `key` naming
the bridge and the outputs' specs. The handler hands this module NumPy views of XLA's own
buffers (inputs read-only); the bridge runs on private copies of the inputs, and its results
are copied into XLA's output buffers. Under `jit` alone a differentiated call's forward keeps
the source's autograd state for its backward call (modes "forward" and "pull" of `call`), in a
stash bounded by `STASH_SIZE`.

The executable keeps the bridges it calls alive: the lowering hands each to JAX's keep-alive
list, as JAX does for a host callback's function, so a jitted or ahead-of-time compiled
function works as long as it exists, whatever becomes of the `interop.wrap` object. Exporting
one (`jax.export`) is refused with `UnsupportedTransformError` (JAX refuses host callbacks
alike); keys start at a random base per process, so a key from elsewhere names no bridge here
and is refused the same way.

The path is used where the compiled accelerator is (`interop.speedups.SPEEDUPS` is set, i.e. not
INTEROP_PURE_PYTHON=1), the extension was built, registration succeeded and JAX's default
backend is the CPU; otherwise `jax.pure_callback` runs the bridge, as before. `PATH` and `WHY`
say which and why. A failure inside the handler is raised by JAX from the jitted call
(`jax.errors.JaxRuntimeError`) with the typed error's name and message; `last_error()` gives
the exception itself.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import secrets
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from interop.grad import BridgedFunction, TensorSpec, UnsupportedTransformError, dtype_name
from interop.grad.bridged import Stash

TARGET = "interop_jax_bridge"

#: Which path traced calls take: "xla_ffi" or "pure_callback"; `WHY` says why.
PATH = "pure_callback"
WHY = "not checked yet"

_checked = False
_held_off = [0]  # inside `host_callback()`
#: key -> (the bridge, weakly; the outputs' specs; the mode: "run", "forward" or "pull")
_ENTRIES: dict[int, tuple[weakref.ref[BridgedFunction], list[TensorSpec], str]] = {}
_KEYS = itertools.count(secrets.randbits(40) << 22)  # unique here, unlikely elsewhere
STASH_SIZE = 8
#: forward calls' kept autograd state by token (0 is no token: the pull recomputes)
_STASH = Stash(STASH_SIZE)
_DTYPES: dict[int, np.dtype[Any]] = {}
_failure: list[BaseException | None] = [None]
_PRIMITIVE: list[Any] = []


def active() -> bool:
    """Whether traced calls go through the FFI handler (registered on first call)."""
    if not _checked:
        _register()
    return PATH == "xla_ffi" and not _held_off[0]


@contextlib.contextmanager
def host_callback() -> Iterator[None]:
    """Functions traced meanwhile use `jax.pure_callback` (to compare the two paths: a jitted
    function keeps the path it was traced with)."""
    _held_off[0] += 1
    try:
        yield
    finally:
        _held_off[0] -= 1


def _register() -> None:
    global PATH, WHY, _checked
    _checked = True
    from interop.speedups import SPEEDUPS

    if SPEEDUPS is None:
        WHY = "the compiled accelerator is off (INTEROP_PURE_PYTHON=1) or not built"
        return
    try:
        from . import _xla_ffi  # type: ignore[attr-defined]
    except ImportError as exc:
        WHY = f"the extension interop_jax._xla_ffi is not built ({exc})"
        return
    import jax

    if jax.default_backend() != "cpu":
        WHY = f"JAX's default backend is {jax.default_backend()}, the handler runs on the CPU"
        return
    try:
        _DTYPES.update(_dtype_codes())
        _xla_ffi.set_callback(_run)
        jax.ffi.register_ffi_target(TARGET, _xla_ffi.handler(), platform="cpu", api_version=1)
        _PRIMITIVE.append(_primitive())
    except Exception as exc:  # an older or changed JAX: the host callback still works
        WHY = f"registering the FFI handler failed: {type(exc).__name__}: {exc}"
        return
    PATH, WHY = "xla_ffi", f"XLA FFI custom call {TARGET!r} (interop_jax._xla_ffi)"


def _dtype_codes() -> dict[int, np.dtype[Any]]:
    """XLA_FFI_DataType codes (xla/ffi/api/c_api.h) of the dtypes JAX arrays cross in (its
    adapter's NARROW and WIDE; the sub-byte ones cross nowhere, the C side views none)."""
    import ml_dtypes

    codes: dict[int, Any] = {
        1: np.bool_, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.uint8,
        7: np.uint16, 8: np.uint32, 9: np.uint64, 10: np.float16, 11: np.float32,
        12: np.float64, 15: np.complex64, 18: np.complex128, 16: ml_dtypes.bfloat16,
    }  # fmt: skip
    for code, name in ((19, "float8_e5m2"), (20, "float8_e4m3fn"), (23, "float8_e4m3b11fnuz"),
                       (24, "float8_e5m2fnuz"), (25, "float8_e4m3fnuz"), (28, "float8_e4m3"),
                       (29, "float8_e3m4"), (33, "float8_e8m0fnu")):  # fmt: skip
        if hasattr(ml_dtypes, name):
            codes[code] = getattr(ml_dtypes, name)
    return {code: np.dtype(t) for code, t in codes.items()}


def call(
    bridge: BridgedFunction,
    specs: list[TensorSpec],
    shapes: tuple[Any, ...],
    xs: tuple[Any, ...],
    mode: str = "run",
) -> Any:
    """The bridge's outputs for traced `xs`, as one FFI custom call (one per batch element
    under `vmap`: the function may not batch).

    mode "forward" also returns an int32 token naming the source's autograd state, kept for
    the "pull" call that takes it as its last input (with the inputs and cotangents, `specs`
    then the gradients'): the gradient then needs no second forward. A token not found (the
    stash dropped it, the call was duplicated, or it is 0) recomputes through
    `bridge.backward()`."""
    import jax

    key = _key(bridge, specs, mode)
    if mode == "forward":
        shapes = (*shapes, jax.ShapeDtypeStruct((), np.int32))
    avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in shapes)
    return _PRIMITIVE[0].bind(*xs, bridge=bridge, key=key, avals=avals)


def _primitive() -> Any:
    """The jaxpr primitive of one bridge call: lowered to the custom call, the bridge handed to
    the executable's keep-alive list; batched one element at a time (`jax.lax.map`)."""
    import jax
    from jax.extend.core import Primitive
    from jax.interpreters import batching, mlir

    prim = Primitive(TARGET)
    prim.multiple_results = True
    prim.def_abstract_eval(lambda *_, avals, **__: list(avals))
    prim.def_impl(lambda *xs, **params: jax.jit(functools.partial(prim.bind, **params))(*xs))
    lower = jax.ffi.ffi_lowering(TARGET)

    def lowering(ctx: Any, *xs: Any, bridge: BridgedFunction, key: int, avals: Any) -> Any:
        if getattr(ctx.module_context.lowering_parameters, "for_export", False):
            raise UnsupportedTransformError(
                f"{bridge.label}: jax.export cannot carry a function bridged from "
                f"{bridge.source.name}: the serialized computation would call Python code it "
                "cannot hold; export the parts around it, or call the jitted function (or its "
                ".lower().compile()) in the process that wrapped it"
            )
        ctx.module_context.add_keepalive(bridge)  # lives as long as the executable
        return lower(ctx, *xs, key=np.int64(key))

    def batched(args: Any, dims: Any, **params: Any) -> Any:
        mapped = [d is not None for d in dims]  # None: not batched

        def one(row: list[Any]) -> Any:
            each = iter(row)
            return prim.bind(
                *[next(each) if m else a for a, m in zip(args, mapped, strict=True)], **params
            )

        rows = [
            jax.numpy.moveaxis(a, d, 0) for a, d, m in zip(args, dims, mapped, strict=True) if m
        ]
        outs = jax.lax.map(one, rows)
        return outs, [0] * len(outs)

    mlir.register_lowering(prim, lowering, platform="cpu")
    batching.primitive_batchers[prim] = batched
    return prim


def _key(bridge: BridgedFunction, specs: list[TensorSpec], mode: str = "run") -> int:
    """The table key of (bridge, specs), made once; the bridge's death frees its keys."""
    held = bridge.state.get("jax_ffi")
    if held is None:
        keys: dict[tuple[str, tuple[TensorSpec, ...]], int] = {}

        def forget(_: Any, keys: dict[tuple[str, tuple[TensorSpec, ...]], int] = keys) -> None:
            for key in keys.values():
                _ENTRIES.pop(key, None)

        held = bridge.state["jax_ffi"] = (weakref.ref(bridge, forget), keys)
    ref, keys = held
    key = keys.get((mode, tuple(specs)))
    if key is None:
        key = keys[mode, tuple(specs)] = next(_KEYS)
        _ENTRIES[key] = (ref, list(specs), mode)
    return key


def entries() -> int:
    """How many (bridge, specs) keys are live (freed with their bridges)."""
    return len(_ENTRIES)


def last_error() -> BaseException | None:
    """The exception the last failing handler call raised (JAX reports only its message; the
    handler may run on one of XLA's threads)."""
    return _failure[0]


def _view(buffer: tuple[Any, int, tuple[int, ...]]) -> Any:
    memory, code, shape = buffer
    return np.ndarray(shape, _DTYPES[code], memory)


def stashed() -> int:
    """How many forward calls' autograd states are kept (at most `STASH_SIZE`)."""
    return len(_STASH)


def _outputs(bridge: BridgedFunction, mode: str, ins: tuple[Any, ...], outs: list[Any]) -> Any:
    """The bridge's results for the handler's mode; a "forward" token is written into `outs`."""
    if mode == "pull":  # inputs, cotangents, the forward's token
        pull = _STASH.take(int(_view(ins[-1])), bridge)
        if pull is not None:  # only the cotangents are read
            with bridge.source.threads(bridge.threads):
                return pull([np.array(_view(b)) for b in ins[len(bridge.diff) : -1]])
        return bridge.backward().run_inside(_copies(ins[:-1]), "numpy", owned=True)
    if mode == "run":
        return bridge.run_inside(_copies(ins), "numpy", owned=True)
    with bridge.source.threads(bridge.threads):
        ys, pull = bridge.forward(_copies(ins), "numpy", owned=True)
    outs.pop()[()] = _STASH.keep(bridge, pull)
    return ys


def _copies(ins: tuple[Any, ...]) -> list[Any]:
    """One private copy of each input: the conversion then shares it zero-copy, where a
    read-only view of XLA's buffer would take the engine's slower copying route; the bridge
    owns it, so the source need not copy it again (`owned=True`)."""
    return [np.array(_view(b)) for b in ins]


def _run(key: int, ins: tuple[Any, ...], outs: tuple[Any, ...]) -> None:
    """Called by the handler, holding the GIL: run the bridge on views of XLA's buffers."""
    try:
        entry = _ENTRIES.get(key)
        bridge = entry and entry[0]()
        if entry is None or bridge is None:
            raise UnsupportedTransformError(
                f"interop: the custom call {TARGET!r} names bridge {key}, which this process "
                "does not hold: a compiled function keeps the Python functions it calls alive "
                "only in the process that compiled it, and a serialized one (jax.export, "
                "a compilation cache) cannot carry them; compile the function that calls "
                "the interop.wrap function in this process"
            )
        _, specs, mode = entry
        views = [_view(b) for b in outs]  # XLA's outputs, of the specs announced
        ys = _outputs(bridge, mode, ins, views)
        if len(ys) != len(views) or any(
            y.shape != v.shape or y.dtype != v.dtype for y, v in zip(ys, views, strict=False)
        ):
            got = [TensorSpec(tuple(y.shape), dtype_name(y.dtype)) for y in ys]
            bridge.check_specs(got, specs)  # raises, naming both
        for view, y in zip(views, ys, strict=True):
            np.copyto(view, y, casting="no")
    except BaseException as exc:
        _failure[0] = exc
        raise
