"""The cross-framework conformance suite, as a test class a plugin's tests subclass.

Every ordered pair that involves `framework` (every pair of installed frameworks when it is
None) is checked across dtypes, shapes and layouts: values equal bit for bit through the
frameworks' own oracles (`Adapter.to_bytes`), zero-copy proven by data address exactly where
`explain` promises it, `copy=False` and `copy=True` honoured, writes through shared results
visible to writable sources, declared gaps refused with the library's own errors, and memory
given through DLPack released exactly once. Every result is also *used*: the target's own
kernels (`Adapter.exercise`: x + x and a sum) run on it and are compared with NumPy values
computed from the source's bytes, since a tensor that reads back fine can still abort the
first kernel that touches it.

The cases run in a child interpreter (`interop.testing.isolation.Worker`), so that a case that
aborts the process fails that case, named, with the signal and the framework's last words; a
fresh child takes the next case. After `aborts_per_group` aborts in one pair, its remaining
cases are reported as not run. An adapter registered at run time (no entry point, so a child
cannot find it by itself) is made there from its class's module and name, as the parent made
it (`worker_recipe`); one whose class the child cannot import, and runs with
`INTEROP_KIT_IN_PROCESS=1` (for a debugger), stay in-process. Either way an exception from an
adapter hook fails its case naming the hook (`interop.testing.hooks`).
"""

from __future__ import annotations

import atexit
import gc
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from traceback import format_exc
from typing import Any, ClassVar

import pytest

import interop
from interop.adapter import WRITABLE, Adapter
from interop.compat import Shimmed
from interop.dlpack import dtype_bits
from interop.engine import deliver_unplanned, parse_device
from interop.exchange import Exchange
from interop.info import CPU, Device
from interop.registry import REGISTRY
from interop.roles import CapsuleBoxes, Gradients, PytreeNodes, Sharding, Testing

from . import reference
from .counting import COUNTER, counting_capsule
from .frameworks import canonical_name
from .hooks import call_naming_hooks
from .isolation import DIED, HUNG, RAISED, Outcome, Worker, qualified_name, resolve

IN_PROCESS_ENV = "INTEROP_KIT_IN_PROCESS"
NOT_RUN = "not run"  # a case skipped because its group aborted the process too often

#: the dtypes the kit converts between every pair (DLPack names)
DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 bfloat16 float32 float64 complex64 complex128"
).split()
#: the shapes each case runs at (0-d and empty ones among them)
SHAPES: tuple[tuple[int, ...], ...] = (
    (),
    (4,),
    (3, 4),
    (2, 3, 4),
    (3, 1),
    (1, 4),
    (2, 1, 4),
    (0,),
    (0, 4),
    (3, 0),
)
#: the source views each case is made as
LAYOUTS = ("contiguous", "transposed", "step-sliced", "offset", "negative")


def explain_or_raise(x: Any, to: Any, **options: Any) -> Any:
    """`interop.explain`, raising the refusal a refused plan carries (`plan.error`, which
    `explain` returns instead of raising): for tests checking that `convert` and `explain`
    refuse alike (`for call in (interop.convert, explain_or_raise)`)."""
    plan = interop.explain(x, to, **options)
    if plan.error is None:
        return plan
    error = plan.error
    del plan
    try:
        raise error
    finally:
        del error  # (this frame, in its traceback, must not hold it: a cycle keeps memory)


def _device(name: str) -> Device:
    """A suite's `device` ("cpu", "cuda:0", ...) as the core's Device."""
    return parse_device(name) or CPU


def usable_adapters(device: Device = CPU) -> list[Adapter]:
    """Adapters that load and hold tensors on `device` here, by name (GPU-only frameworks such
    as CuPy join only a GPU suite). Only installed ones (entry points): the partners of the
    kit's pairs, which a test registering adapters of its own at run time does not change (the
    suite's own adapter joins them however it was registered)."""
    installed = {i.name for i in REGISTRY.infos() if i.distribution and i.status == "loaded"}
    return sorted(
        (
            a
            for a in REGISTRY.loaded()
            if a.name in installed
            and a.unavailable() is None
            and isinstance(a, Testing)
            and device.type in a.capabilities().devices
            and a.device_unavailable(device) is None
        ),
        key=lambda a: a.name,
    )


def unusable_reasons(device: Device) -> str:
    """Why the loaded adapters that declare `device`'s type cannot hold tensors there."""
    reasons = []
    for a in REGISTRY.loaded():
        if device.type in a.capabilities().devices:
            why = a.unavailable() or a.device_unavailable(device)
            if why:
                reasons.append(f"{a.name}: {why}")
    return "; ".join(reasons) or f"no installed framework declares {device.type}"


def _sample(src: Adapter, dtype: str, shape: tuple[int, ...], device: Device) -> Any:
    """The source's own sample, moved by its framework onto `device` where it made it elsewhere
    (a GPU suite; JAX makes arrays on a GPU by default where it sees one)."""
    x = src.sample(dtype, shape)
    if device == CPU and src.capabilities().cpu_only:
        return x
    try:
        made_on = interop.inspect(x).device
    except interop.InteropError:
        return x  # a dtype it cannot export: the case says so
    return x if (made_on.type, made_on.id) == device else src.to_device(x, device)


def _itemsize(adapter: Adapter, x: Any, size: int) -> int:
    return len(adapter.to_bytes(x)) // size if size else 0


def use_result(adapter: Adapter, y: Any, dtype: str, expected: bytes, what: str) -> None:
    """Run the framework's own kernels on `y` (`adapter.exercise`) and compare them with NumPy
    values computed from `expected`, the bytes `y` must hold."""
    used = adapter.exercise(y)
    if used is None:
        return  # the framework has no kernels for this dtype
    doubled, total = used
    shape = tuple(int(n) for n in y.shape)
    assert tuple(int(n) for n in doubled.shape) == shape, f"{what}: x + x changed the shape"
    want = reference.doubled(dtype, expected)
    if want is not None:
        op = "not x" if dtype == "bool" else "x + x"
        assert adapter.to_bytes(doubled) == want, f"{what}: {adapter.name}'s {op} differs"
    assert tuple(total.shape) == (), f"{what}: the sum is not 0-d (shape {tuple(total.shape)})"
    wrong = reference.total_mismatch(dtype, expected, adapter.to_bytes(total))
    assert wrong is None, f"{what}: {adapter.name}'s sum is wrong: {wrong}"


def assert_bytes(adapter: Adapter, y: Any, expected: bytes, what: str, source: str) -> None:
    """`y`'s bytes, read by `adapter.to_bytes`, are `expected` (what `source` holds)."""
    got = adapter.to_bytes(y)
    assert got == expected, (
        f"{what}: values differ ({adapter.name}.to_bytes of the result != {source}: "
        f"{len(got)} and {len(expected)} bytes)"
    )


@dataclass(frozen=True)
class _Case:
    """One pair case's source tensor and what every result must hold."""

    src: Adapter
    dst: Adapter
    x: Any
    dtype: str
    expected: bytes  # the source's own bytes
    size: int
    device: Device

    def values(self, y: Any, what: str) -> None:
        """`y`'s bytes (the target's `to_bytes`) are the source's (its `to_bytes`), and the
        target's kernels on `y` give what NumPy gives on them."""
        source = f"{self.src.name}.to_bytes of the source"
        assert_bytes(self.dst, y, self.expected, what, source)
        use_result(self.dst, y, self.dtype, self.expected, what)

    def shares(self, y: Any) -> bool:
        """Whether `y` starts at the source's first element (by both sides' `data_address`)."""
        return self.dst.data_address(y) == self.src.data_address(self.x)

    @property
    def addressed(self) -> bool:
        """Whether addresses say anything: an empty tensor's may be anything."""
        return bool(self.size and self.expected)


def _source(src: Adapter, dtype: str, shape: tuple[int, ...], layout: str, device: Device) -> Any:
    """The case's source tensor in `layout`, or a str saying why the case does not apply."""
    try:
        x = _sample(src, dtype, shape, device)
    except Exception as exc:  # the source framework cannot make this dtype at all
        # ... which is a gap only if it does not declare it: else the pair would pass untested
        assert dtype not in src.capabilities().export_dtypes, (
            f"{src.name} declares {dtype} but its sample() cannot make one: "
            f"{type(exc).__name__}: {exc}"
        )
        return f"n/a ({src.name} cannot make {dtype}: {type(exc).__name__})"
    if layout == "contiguous":
        return x
    if len(shape) < (2 if layout == "transposed" else 1):
        return "n/a"
    return src.views(x).get(layout, "n/a")


def _refused(case: _Case, plan: Any) -> str | None:
    """What a refused plan gives ("unsupported ndim", "unsupported dtype"), after checking it
    is a declared gap refused alike by `explain` and `convert`; None when not refused."""
    src, dst, x, dtype = case.src, case.dst, case.x, case.dtype
    caps = dst.capabilities()
    ndim = len(x.shape)
    too = dst.ndim_refusal(ndim) if dtype in caps.import_dtypes else None
    refusal = plan.error
    if too:  # a declared limit (Capabilities.min_ndim, max_ndim): refused, typed, by both
        assert isinstance(refusal, interop.UnsupportedLayoutError), plan
        assert f"{dst.name} cannot" in str(plan), plan
        with pytest.raises(interop.UnsupportedLayoutError, match=f"{dst.name} cannot"):
            interop.convert(x, dst.name)
        return "unsupported ndim"
    if isinstance(refusal, interop.UnsupportedDTypeError):
        assert dtype in str(refusal), f"the error does not name the dtype: {refusal}"
        declared = dtype not in caps.import_dtypes or dst.refusal(interop.inspect(x))
        assert declared or dtype not in src.capabilities().export_dtypes, (
            f"{src.name} -> {dst.name} refused {dtype} without a declared gap: {refusal}"
        )
        with pytest.raises(interop.UnsupportedDTypeError):
            interop.convert(x, dst.name)
        return "unsupported dtype"
    if refusal is not None:  # any other refusal fails the case, as convert would raise it
        raise refusal
    return None


def _copy_false(case: _Case, zero_copy: bool) -> None:
    """`copy=False` shares where the plan promised it, and raises CopyForbiddenError (a
    BufferError) elsewhere. Run first, while the target holds nothing of this memory."""
    if not zero_copy:
        with pytest.raises(interop.CopyForbiddenError) as info:
            interop.convert(case.x, case.dst.name, copy=False)
        assert isinstance(info.value, BufferError)
        return
    again = interop.convert(case.x, case.dst.name, copy=False)
    case.values(again, "the copy=False result")
    if case.addressed:
        assert case.shares(again), "copy=False did not share"
    del again
    # its release may be deferred to the core's thread (Paddle's frees_under_lock), and with
    # it the target's claim on the address: the plain convert must find the address free
    case.dst.synchronize()


def _plain(case: _Case, plan: Any) -> tuple[Any, bool]:
    """`convert(x, to)`: the result, on the device, with the values, shared exactly where
    `explain` said; and whether it shares the source's memory."""
    dst, x = case.dst, case.x
    y = interop.convert(x, dst.name)
    assert tuple(int(n) for n in y.shape) == tuple(int(n) for n in x.shape), "shape changed"
    landed = interop.inspect(y).device
    assert (landed.type, landed.id) == case.device, (
        f"the result is on {landed}, not on {case.device}"
    )
    case.values(y, "the result")
    shared = case.size > 0 and case.shares(y)
    if case.addressed:
        assert shared == plan.zero_copy, f"explain said zero_copy={plan.zero_copy}:\n{plan}"
    if shared and dst.capabilities().one_import_per_address:
        # a second import of memory it holds would drop the first's release: copied, said so
        second = interop.explain(x, dst.name)
        assert not second.zero_copy and "data address" in str(second), second
        twice = interop.convert(x, dst.name)
        case.values(twice, "the second result")
        assert not case.shares(twice), "imported the same memory twice"
    return y, shared


def _copy_true(case: _Case) -> None:
    """`copy=True` gives fresh memory with the same values."""
    fresh = interop.convert(case.x, case.dst.name, copy=True)
    case.values(fresh, "the copy=True result")
    if case.addressed:
        assert not case.shares(fresh), "copy=True shared memory"


def _write_seen(case: _Case, y: Any) -> bool:
    """Whether a write through shared result `y` (the target's `mutate`) changed the
    source's first element, after checking the source sees exactly what `y` holds."""
    if case.src.capabilities().immutable or not case.dst.mutate(y):
        return False
    after = case.src.to_bytes(case.x)
    assert after == case.dst.to_bytes(y), (
        f"a write through the result ({case.dst.name}.mutate) is not seen by the source "
        f"({case.src.name}.to_bytes)"
    )
    width = _itemsize(case.dst, y, case.size)
    return case.expected[:width] != after[:width]


def check_pair(
    src: Adapter,
    dst: Adapter,
    dtype: str,
    shape: tuple[int, ...],
    layout: str,
    device: Device = CPU,
) -> str:
    """Convert one case every way and assert; returns what happened ("zero-copy", ...).
    The source tensor lives on `device`, and so must every result."""
    x = _source(src, dtype, shape, layout, device)
    if isinstance(x, str):
        return x
    size = math.prod(int(n) for n in x.shape)
    case = _Case(src, dst, x, dtype, src.to_bytes(x), size, device)
    plan = interop.explain(x, dst.name)  # a refusal is explained: plan.error, not raised
    refused = _refused(case, plan)
    if refused is not None:
        return refused
    _copy_false(case, plan.zero_copy)
    y, shared = _plain(case, plan)
    _copy_true(case)
    if shared and _write_seen(case, y):
        return "zero-copy, write seen"
    return "zero-copy" if plan.zero_copy else "copied"


#: twelve float32 sample values: released-once and read-only cases use their results too
PAYLOAD = struct.pack("<12f", *((i * 37 + 11) % 251 / 8 - 15 for i in range(12)))


def release_once(target: str, versioned: bool) -> None:
    """A counting capsule converted into `target`, used, then freed: released exactly once."""
    dst = REGISTRY.get(target)
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=versioned)
    try:
        y = interop.convert(capsule, dst.name)
        assert_bytes(dst, y, PAYLOAD, "the result", "the capsule's payload")
        use_result(dst, y, "float32", PAYLOAD, "the result")
        del y
    finally:
        del capsule
        gc.collect()
    dst.synchronize()  # (Streams: an engine that frees later, MXNet's, has freed by now)
    gc.collect()
    assert COUNTER.released(address) == 1, (
        f"{dst.name} released the memory " + str(COUNTER.released(address)) + " times"
    )


def read_only_memory(target: str) -> None:
    """Read-only memory reaches a writable consumer only as a copy, and is released once."""
    dst = REGISTRY.get(target)
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), read_only=True)
    plan = interop.explain(capsule, dst.name)
    if dst.capabilities().import_access == WRITABLE:
        assert not plan.zero_copy, "read-only memory would reach a writable consumer"
        with pytest.raises(interop.CopyForbiddenError):
            interop.convert(capsule, dst.name, copy=False)
    y = interop.convert(capsule, dst.name)
    assert_bytes(dst, y, PAYLOAD, "the result", "the read-only capsule's payload")
    use_result(dst, y, "float32", PAYLOAD, "the result")
    if dst.mutate(y):
        assert not plan.zero_copy
    del y, capsule
    gc.collect()
    assert COUNTER.released(address) == 1


FIRST_PLAN = """
import sys, numpy, interop
from interop.registry import REGISTRY
if len(sys.argv) > 2:  # registered at run time: made as the kit's worker makes it
    from interop.testing.isolation import resolve
    interop.register(resolve(*sys.argv[2:5])(), replace=True)
target = REGISTRY.get(sys.argv[1])
if target.imported():
    print("imported with interop or NumPy: no plan is made before its import")
else:
    a = REGISTRY.get("numpy").copy(numpy.arange(1000, dtype=numpy.float32))  # 64-byte aligned
    from interop.testing.hooks import call_naming_hooks  # the failing hook, named
    call_naming_hooks(interop.convert, a, target.name)
    print(interop.explain(a, target.name))
"""


def first_plan_imports(target: str, recipe: list[str] | None = None) -> None:
    """The first plan into a framework, in a process that has not imported it, is made before
    the plan's import step imports it: the adapter's fast-path hooks must import it then (a
    hook that fails is the cached plan's reason for no route: every later call of that kind
    would be planned again). `recipe`: an adapter registered at run time (`worker_recipe`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", FIRST_PLAN, target, *(recipe or ())],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = out.stderr.strip().splitlines() or [""]
    last = next((line for line in lines if "HookError: " in line), lines[-1])
    assert out.returncode == 0, (
        f"a NumPy array into {target} in a fresh process: {last}\n{out.stderr}"
    )
    failed = [line.strip() for line in out.stdout.splitlines() if "hook failed" in line]
    assert not failed, f"the first plan into {target}, before its import: {failed[0]}"


def copy_hook(target: str) -> None:
    """The adapter's `copy`, which `convert(x, to=its own framework, copy=True)` calls: for a
    sample and each of its views, a fresh row-major tensor with the same values, which the
    framework's kernels use and whose writes do not reach the original."""
    adapter = REGISTRY.get(target)
    x = adapter.sample("float32", (3, 4))
    for what, source in {"a sample": x, **adapter.views(x)}.items():
        where = f"{target}.copy of {what}"
        expected = adapter.to_bytes(source)
        y = interop.convert(source, target, copy=True)
        assert_bytes(adapter, y, expected, where, f"{target}.to_bytes of {what}")
        use_result(adapter, y, "float32", expected, where)
        assert adapter.data_address(y) != adapter.data_address(source), f"{where} shares memory"
        shape = tuple(int(n) for n in y.shape)
        rows = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
        strides = interop.inspect(y).strides
        assert strides == rows, f"{where} has strides {strides}, not row-major {rows}"
        if adapter.mutate(y):
            assert adapter.to_bytes(source) == expected, f"a write to {where} reached it"


def declared_gaps_refused(target: str, dtypes: list[str]) -> None:
    """Dtypes the target does not declare are refused, typed, and their capsules released."""
    dst = REGISTRY.get(target)
    missing = [d for d in dtypes if d not in dst.capabilities().import_dtypes]
    for dtype in missing:
        width = max(dtype_bits(dtype) // 8, 1)
        capsule, address = counting_capsule(bytes(4 * width), dtype, (4,))
        with pytest.raises(interop.UnsupportedDTypeError, match=dtype):
            interop.convert(capsule, dst.name)
        del capsule
        gc.collect()
        assert COUNTER.released(address) == 1, f"{dtype}: refused capsule leaked"


def declared_gaps_are_real(target: str, dtypes: list[str], device: str = "cpu") -> None:
    """A dtype the adapter refuses must be one its framework cannot import faithfully:
    handed the capsule directly (no plan), the framework must fail or change the dtype
    or the values. Otherwise the library would refuse what the frameworks support."""
    place = _device(device)
    dst = REGISTRY.get(target)
    caps = dst.capabilities()
    false_gaps = []
    refused = (d for d in dtypes if d not in caps.import_dtypes)
    for dtype in (d for d in refused if d not in caps.import_gaps):  # gaps with a reason
        for src in usable_adapters(place):
            if src is dst or dtype not in src.capabilities().export_dtypes:
                continue
            try:
                x = _sample(src, dtype, (4,), place)
                exchange = Exchange.from_source(
                    src.export(x), versioned=caps.wants_versioned, framework=src.name
                )
            except Exception:
                continue  # the source cannot make or export it here
            expected = src.to_bytes(x)
            try:
                y = deliver_unplanned(exchange, dst)
                same = interop.inspect(y).dtype == dtype and dst.to_bytes(y) == expected
            except Exception:
                same = False
            if same:
                false_gaps.append(f"{src.name} -> {dst.name} {dtype}")
            break  # one source that exports it is enough
    assert not false_gaps, f"{dst.name} declares gaps its framework does not have: " + (
        ", ".join(false_gaps)
    )


def sharded_hook_lacks(hook: Any) -> list[str]:
    """The `ShardedArrays` members `hook` lacks: optional ones may be missing, and a renamed
    one may go by its first name (`interop.adapter.SHARDED_FORMER_NAMES`)."""
    from interop.adapter import SHARDED_FORMER_NAMES, SHARDED_OPTIONAL, ShardedArrays

    members = {n for n in (*vars(ShardedArrays), *ShardedArrays.__annotations__) if n[0] != "_"}
    return sorted(
        n
        for n in members - SHARDED_OPTIONAL
        if not hasattr(hook, n) and not hasattr(hook, SHARDED_FORMER_NAMES.get(n, n))
    )


def sharded_hook(target: str) -> None:
    """An adapter's `sharded()` hook (contract 1.1): one object with every documented member,
    that on a single process does not take the framework's plain tensor for a distributed
    array (nor for a mesh), so `interop.sharding` leaves it to the per-tensor path."""
    from interop.sharding import convert_sharded, explain_sharded, is_sharded

    adapter = REGISTRY.get(target)
    hook = adapter.sharded()
    assert hook is not None, f"{target}'s sharded() returned None in a child"
    missing = sharded_hook_lacks(hook)
    assert not missing, f"{target}'s sharded() gives {hook!r}, which lacks {missing}"
    assert adapter.sharded() is hook, f"{target}'s sharded() must return the same object"
    x = adapter.sample("float32", (2, 3))
    assert not (hook.is_array_type(type(x)) and hook.is_sharded(x, False)), (
        f"{target}'s sharded() takes a plain {type(x).__name__} for a distributed array"
    )
    assert not hook.is_mesh(x), f"{target}'s sharded() takes a {type(x).__name__} for a mesh"
    assert not is_sharded(x) and convert_sharded(x, target) is None
    assert explain_sharded(x, target) is None


def capsule_boxes_hook(target: str) -> None:
    """An adapter's `capsule_boxes(releases)` hook: its boxes bridge a legacy capsule into a
    versioned one and re-wrap one with its release deferred, and each tensor boxed is read back
    by the framework, used, and released exactly once when the result goes."""
    from interop import capsule as cap
    from interop import dlpack as dl
    from interop.info import read_capsule

    dst = REGISTRY.get(target)
    assert isinstance(dst, CapsuleBoxes), f"{target} declares no CapsuleBoxes role"
    boxes = dst.capsule_boxes(cap.RELEASES)
    if boxes is None:
        pytest.skip(f"{target}'s capsule_boxes() makes no boxes with this {target} version")
    for way in ("bridge", "defer"):
        capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
        inner = cap.pointer(capsule, False)[0]
        if way == "bridge":
            boxed = boxes.bridge(capsule, inner, False, 0)
        else:
            boxed = boxes.defer(capsule, inner, False, False)
        assert boxed not in (None, NotImplemented), f"{target}'s boxes refused a CPU float32"
        assert cap.capsule_name(capsule) == dl.USED_LEGACY_NAME, f"{way}: the old one not used"
        assert read_capsule(boxed).version is not None, f"{way}: not a versioned capsule"
        y = interop.convert(boxed, target)
        assert_bytes(dst, y, PAYLOAD, f"{way}: a tensor over {target}'s box", "the payload")
        use_result(dst, y, "float32", PAYLOAD, f"a tensor over {target}'s {way} box")
        del y, boxed, capsule
        gc.collect()
        cap.flush_deferred()
        gc.collect()
        assert COUNTER.released(address) == 1, (
            f"{way}: released {COUNTER.released(address)} times, not once"
        )


def tree_node_hook(target: str) -> None:
    """An adapter's `tree_node()` hook (contract 1.1): one function every time, which takes
    neither the framework's own tensor nor an object it cannot know for a container (so
    `convert_tree` converts the first and keeps the second), and whose tensor in a dict still
    converts as a leaf through `convert_tree`, read back with `to_bytes`."""
    adapter = REGISTRY.get(target)
    nodes = adapter.tree_node()
    assert callable(nodes), f"{target}'s tree_node() gives {nodes!r}, not a function or None"
    assert adapter.tree_node() is nodes, f"{target}'s tree_node() must return the same function"
    x = adapter.sample("float32", (2, 3))
    assert nodes(x) is None, f"{target}'s tree node takes its own {type(x).__name__} apart"
    stranger = object()
    assert nodes(stranger) is None, f"{target}'s tree node takes a plain object() apart"
    out = interop.convert_tree({"x": x, "other": stranger}, target, copy=True)
    assert out["other"] is stranger, f"convert_tree into {target} did not keep an object()"
    assert adapter.owns(out["x"]) and adapter.to_bytes(out["x"]) == adapter.to_bytes(x), (
        f"convert_tree into {target} did not give its tensor back as a {target} leaf"
    )


def _owned(adapter: Adapter, kind: type) -> bool:
    """Whether `kind` is one of `adapter`'s types: a subclass of its `tensor_types()`, or a type
    of one of its `modules` (an adapter that answers with `owns()` alone)."""
    try:
        types = adapter.tensor_types()
    except NotImplementedError:
        types = ()
    root = (getattr(kind, "__module__", None) or "").partition(".")[0]
    return issubclass(kind, types) or root in adapter.modules


def _floats(adapter: Adapter, x: Any, what: str) -> list[float]:
    """`x`'s float32 elements, read back through the adapter's own `to_bytes`."""
    data = adapter.to_bytes(x)
    assert len(data) % 4 == 0, f"{what}: {len(data)} bytes are no float32 elements"
    return list(struct.unpack(f"={len(data) // 4}f", data))


def grad_partner(adapter: Adapter, adapters: list[Adapter]) -> Adapter | None:
    """The adapter whose hook completes `adapter`'s round trip in `grad_hooks`: itself when it
    brings both a source and a target, else the first of `adapters` (by name) bringing the
    missing one; None when none does."""
    source, target = adapter.grad_source() is not None, adapter.grad_target() is not None
    if source and target:
        return adapter
    for other in sorted(adapters, key=lambda a: a.name):
        if other is adapter or not isinstance(other, Gradients):
            continue
        if (other.grad_target() if source else other.grad_source()) is not None:
            return other
    return None


def grad_hooks(target: str, partner: str | None = None) -> None:
    """An adapter's gradient hooks (contract 1.1): `grad_source()` gives an `interop.grad.Source`
    and `grad_target()` a `Target`, each the same object every time, named as the adapter,
    whose tensor types are the adapter's own and take its tensors. Then, with `partner`'s hook
    completing the pair (`grad_partner`), a round trip: f(x) = sum(x * x), written with the
    source framework's own `*` and sum (`exercise`), wrapped and called with a float32 target
    tensor, has the value sum(x²) and the gradient 2x under the target's own autodiff
    (`Target.value_and_grad`), read back with `to_bytes` and checked against the same sums
    done here from the sample's bytes."""
    from interop.grad import Source, Target, Wrapped

    adapter = REGISTRY.get(target)
    hooks = {"source": (adapter.grad_source, Source), "target": (adapter.grad_target, Target)}
    found: dict[str, Any] = {}
    for role, (hook, base) in hooks.items():
        given = hook()
        if given is None:
            continue
        found[role] = given
        assert isinstance(given, base), (
            f"{target}'s grad_{role}() gives {given!r}, not an interop.grad.{base.__name__}"
        )
        assert hook() is given, f"{target}'s grad_{role}() must return the same object"
        assert given.name == adapter.name, (
            f"{target}'s grad_{role}() is named {given.name!r}, not {adapter.name!r}"
        )
        kinds = tuple(given.tensor_types())
        stray = [k.__name__ for k in kinds if not _owned(adapter, k)]
        assert kinds and not stray, (
            f"{target}'s grad_{role}().tensor_types() must be {target}'s own tensor types; "
            f"{stray or 'none'} are not"
        )
        x = adapter.sample("float32", (2, 3))
        assert isinstance(x, kinds), (
            f"{target}'s grad_{role}().tensor_types() {[k.__name__ for k in kinds]} do not "
            f"take its own {type(x).__name__}"
        )
    assert found, f"{target} declares neither grad_source() nor grad_target()"
    if partner is None:
        return
    other = REGISTRY.get(partner)
    src_adapter, dst_adapter = (adapter, other) if "source" in found else (other, adapter)
    source, dest = src_adapter.grad_source(), dst_adapter.grad_target()
    assert source is not None and dest is not None, f"{partner} completes no pair with {target}"

    def squares(v: Any) -> Any:
        done = src_adapter.exercise(v * v)
        assert done is not None, f"{src_adapter.name} has no float32 sum (exercise)"
        return done[1]

    x = dst_adapter.sample("float32", (4,))
    values = _floats(dst_adapter, x, "the sample")
    wrapped = Wrapped(squares, source, dest)  # the class itself: wrap() returns fn within one
    where = f"sum(x * x) written with {source.name}, called from {dest.name}"
    y, grad = dest.value_and_grad(wrapped, x)
    assert dest.dtype(y) == "float32" and dest.dtype(grad) == "float32", (
        f"{where}: a float32 value and gradient expected, got {dest.dtype(y)} and "
        f"{dest.dtype(grad)}"
    )
    (got,) = _floats(dst_adapter, y, f"{where}: the value")
    want = math.fsum(v * v for v in values)
    assert math.isclose(got, want, rel_tol=1e-5), f"{where} is {got}, not {want}"
    grads = _floats(dst_adapter, grad, f"{where}: the gradient")
    twice = [2 * v for v in values]
    assert len(grads) == len(twice) and all(
        math.isclose(g, t, rel_tol=1e-6, abs_tol=1e-6) for g, t in zip(grads, twice, strict=True)
    ), f"{where}: gradient {grads}, not 2x = {twice}"


def pair_case(
    source: str, target: str, dtype: str, shape: list[int], layout: str, device: str = "cpu"
) -> str:
    """One case of `check_pair`, by names (what the worker runs)."""
    place = _device(device)
    src, dst = REGISTRY.get(source), REGISTRY.get(target)
    return check_pair(src, dst, dtype, tuple(shape), layout, place)


def _compile_cache() -> dict[str, str]:
    """Environment for the worker: a JAX compilation cache on disk for this session, so that
    a child started after an abort does not compile every kernel again (minutes in all)."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return {}
    folder = tempfile.mkdtemp(prefix="interop-kit-jax-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return {
        "JAX_COMPILATION_CACHE_DIR": folder,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


class _Runner:
    """Runs kit cases in one shared worker, with a budget of aborts per group of cases."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.aborts: dict[str, list[str]] = {}

    def run(
        self, group: str, label: str, budget: int, case: Callable[..., Any], *args: Any
    ) -> Outcome:
        deaths = self.aborts.setdefault(group, [])
        if len(deaths) >= budget:
            return Outcome(
                False,
                failure=NOT_RUN,
                error=f"not run: {group} already aborted the process {len(deaths)} times: "
                + "; ".join(deaths),
            )
        if self.worker is None:
            self.worker = Worker(env=_compile_cache())
            atexit.register(self.worker.close)
        outcome = self.worker.call(case, *args)
        if outcome.failure in (DIED, HUNG):
            deaths.append(f"{label} ({outcome.error})")
        return outcome


_RUNNER = _Runner()


@cache
def _entry_point_adapters() -> dict[str, Adapter]:
    """The adapters a child interpreter finds by itself, by name: those loaded from entry
    points (an adapter registered in their place at run time is another object)."""
    infos = interop.adapters()
    return {i.name: REGISTRY.get(i.name) for i in infos if i.entry_point and i.status == "loaded"}


def _from_entry_point(adapter: Adapter) -> bool:
    return _entry_point_adapters().get(adapter.name) is adapter


_RECIPES: dict[type, tuple[str, str, str] | str] = {}  # by class: what the worker makes


def worker_recipe(adapter: Adapter) -> tuple[str, str, str] | str:
    """How the kit's worker makes an adapter registered here at run time: its class's (module,
    file, qualified name), imported there and made without arguments, as an entry point's
    class is; or why the worker cannot (a class in `__main__` or in a function, one that
    takes arguments). A 1.x adapter is made from its own class: the worker's registry shims it
    as this one's did."""
    if isinstance(adapter, Shimmed):
        adapter = adapter.inner
    known = _RECIPES.get(type(adapter))
    if known is None:
        known = _RECIPES[type(adapter)] = _recipe(adapter)
    return known


def _recipe(adapter: Adapter) -> tuple[str, str, str] | str:
    kind = type(adapter)
    where = f"{kind.__module__}:{kind.__qualname__}"
    if kind.__module__ == "__main__" or "<locals>" in kind.__qualname__:
        return f"the kit's worker cannot import {adapter.name}'s class {where}"
    try:
        recipe = qualified_name(kind)
        made = resolve(*recipe)
        if made is kind:
            made()  # as the worker will
    except Exception as exc:
        return f"the kit's worker cannot make {where}(): {type(exc).__name__}: {exc}"
    if made is not kind:
        return f"{where} names another class than {adapter.name}'s in the kit's worker"
    return recipe


def _worker_recipes(names: tuple[str, ...]) -> list[tuple[str, str, str]] | str:
    """What the worker must register to run a case involving adapters `names`: the recipes
    of those registered here at run time; or why it cannot, and the case runs here."""
    recipes = []
    for name in names:
        adapter = REGISTRY.get(name)
        if _from_entry_point(adapter):
            continue
        recipe = worker_recipe(adapter)
        if isinstance(recipe, str):
            return recipe
        recipes.append(recipe)
    return recipes


_MADE: set[tuple[str, ...]] = set()  # in the worker: the run-time adapters registered there


def run_case(recipes: list[list[str]], module: str, file: str, qualname: str, *args: Any) -> Any:
    """What the worker runs: registers the run-time adapters `recipes` name (once per child,
    in place of any of the same name, as in the parent), then the case, naming a failing
    hook (`call_naming_hooks`)."""
    for recipe in map(tuple, recipes):
        if recipe not in _MADE:
            interop.register(resolve(*recipe)(), replace=True)
            _MADE.add(recipe)
    return call_naming_hooks(resolve(module, file, qualname), *args)


_SAID: set[str] = set()


def _say_in_process(why: str) -> None:
    """Warn, once per reason, that cases run in this process, where an abort ends the run."""
    if why not in _SAID:
        _SAID.add(why)
        message = f"the conformance kit runs these cases in this process, not its worker: {why}"
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _run(
    suite: ConformanceSuite,
    group: str,
    label: str,
    names: tuple[str, ...],
    case: Callable[..., Any],
    *args: Any,
) -> Outcome:
    """Run `case(*args)` in the shared worker, which registers the run-time adapters among
    `names` as this process did (`worker_recipe`); in this process where it cannot, and with
    INTEROP_KIT_IN_PROCESS=1. Either way, a failing adapter hook is named."""
    in_process = os.environ.get(IN_PROCESS_ENV, "").strip() not in ("", "0")
    recipes = [] if in_process else _worker_recipes(names)
    if isinstance(recipes, str):
        _say_in_process(recipes)
    elif not in_process:
        how = (recipes, *qualified_name(case))
        return _RUNNER.run(group, label, suite.aborts_per_group, run_case, *how, *args)
    try:
        return Outcome(True, call_naming_hooks(case, *args))
    except (Exception, pytest.fail.Exception) as exc:
        return Outcome(
            False, failure=RAISED, error=f"{type(exc).__name__}: {exc}", detail=format_exc()
        )


def _assert_ok(outcome: Outcome) -> None:
    if not outcome.ok:
        pytest.fail(str(outcome), pytrace=False)


def unusable(adapter: Adapter, device: Device) -> str | None:
    """Why `adapter` cannot hold tensors on `device` here (its framework is not installed, it
    does not declare the device type, the device is not visible), or None."""
    why = adapter.unavailable()
    if why:
        return why
    if not isinstance(adapter, Testing):
        return (
            f"{adapter.name} declares no Testing role: the kit makes and reads its tensors "
            "with that role's hooks (sample, to_bytes, data_address, exercise)"
        )
    declared = adapter.capabilities().devices
    if device.type not in declared:
        return f"{adapter.name} holds tensors on {', '.join(sorted(declared))}, not {device.type}"
    return adapter.device_unavailable(device)


def ensure_registered(adapter: Adapter) -> Adapter:
    """Register `adapter` (`interop.register`) unless its name finds it already, in place of
    another adapter of its name, since the kit tests the object it is given; and return what
    the core converts through: the adapter, or the 2.0 adapter the 1.x shim made of it (whose
    roles are the ones the kit checks)."""
    try:
        found = REGISTRY.get(adapter.name)
        if found is adapter or (isinstance(found, Shimmed) and found.inner is adapter):
            return found
    except interop.InteropError:  # unknown, or a broken adapter of that name
        pass
    interop.register(adapter, replace=True)
    return REGISTRY.get(adapter.name)


#: a test argument's values: (id, value, why it is skipped or None)
Params = list[tuple[str, Any, str | None]]


class ConformanceSuite:
    """Subclass with `framework = "<your adapter's name>"` (an installed adapter, or one
    registered with `interop.register`) or `adapter = MyAdapter()` (registered by the suite
    if it is not yet) to run the kit against it; `against = ("numpy", "torch")` to pair it
    with those only; `device = "cuda:0"` (or another device) to run the pair cases on that
    device, among the frameworks that hold tensors there."""

    framework: ClassVar[str | None] = None
    adapter: ClassVar[Adapter | None] = None
    against: ClassVar[tuple[str, ...] | None] = None
    device: ClassVar[str] = "cpu"
    dtypes: ClassVar[tuple[str, ...] | list[str]] = DTYPES
    shapes: ClassVar[tuple[tuple[int, ...], ...]] = SHAPES
    layouts: ClassVar[tuple[str, ...]] = LAYOUTS
    #: aborts tolerated in one pair (or one target's cases) before the rest are not run
    aborts_per_group: ClassVar[int] = 1

    @classmethod
    def subject(cls) -> Adapter | None:
        """The adapter under test (`adapter`, registered here; or the one `framework` names),
        None for every pair of installed frameworks; raises the registry's error for a name
        that is unknown or broken."""
        if cls.adapter is not None:
            return ensure_registered(cls.adapter)
        return None if cls.framework is None else REGISTRY.get(cls.framework)

    def _partners(self, subject: Adapter | None, device: Device) -> tuple[list[Adapter], Params]:
        """The installed frameworks usable on `device` (those `against` names), with the
        subject; and the pairs with a named partner that cannot be, skipped with why."""
        adapters = [a for a in usable_adapters(device) if subject is None or a.name != subject.name]
        if subject is not None:
            adapters = sorted([*adapters, subject], key=lambda a: a.name)
        if self.against is None:
            return adapters, []
        skipped: Params = []
        wanted = {canonical_name(n, "against") for n in self.against}
        for name in sorted(wanted - {a.name for a in adapters}):
            partner = REGISTRY.get(name)
            why = unusable(partner, device) or f"{name} is not installed through an entry point"
            skipped.append((f"{subject.name if subject else '*'}-{name}", None, why))
        return [a for a in adapters if a is subject or a.name in wanted], skipped

    def parameters(self) -> dict[str, Params] | str:
        """What the tests run over, by argument (`pair`, `target`, `dtype`, `layout`); or why
        every test is skipped. The registry's error for a name it does not know, or an adapter
        it cannot load, is raised: a typo must fail the run, not skip it."""
        device = _device(self.device)
        subject = self.subject()  # (an unknown or broken adapter fails the run: no skip)
        why = unusable(subject, device) if subject is not None else None
        if why:
            return why
        adapters, skipped = self._partners(subject, device)
        if device != CPU and len(adapters) < 2:
            held = ", ".join(a.name for a in adapters) or "none"
            why = f"pairs on {device} need two frameworks there (here: {held})"
            return f"{why}; {unusable_reasons(device)}"
        involved = [a for a in adapters if subject in (None, a)]
        pairs: Params = [
            (f"{s.name}-{d.name}", (s, d), None)
            for s in adapters
            for d in adapters
            if s is not d and (s in involved or d in involved)
        ]
        return {
            "pair": pairs + skipped,
            "target": [(a.name, a, None) for a in involved],
            "dtype": [(d, d, None) for d in self.dtypes],
            "layout": [(name, name, None) for name in self.layouts],
        }

    def pytest_generate_tests(self, metafunc: Any) -> None:
        params = self.parameters()
        for name in ("pair", "target", "dtype", "layout"):
            if name not in metafunc.fixturenames:
                continue
            if isinstance(params, str):  # every case skipped, saying why
                if name in ("pair", "target"):
                    skip = pytest.mark.skip(params)
                    metafunc.parametrize(name, [pytest.param(None, marks=skip)])
                continue
            values = [
                pytest.param(value, id=id_, marks=[pytest.mark.skip(why)] if why else [])
                for id_, value, why in params[name]
            ]
            metafunc.parametrize(name, values)

    def _host_memory_only(self) -> None:
        if _device(self.device) != CPU:
            pytest.skip(
                f"its capsules are host memory: the CPU suite runs it, not the {self.device} one"
            )

    def test_pair(self, pair: tuple[Adapter, Adapter], dtype: str, layout: str) -> None:
        src, dst = pair
        group = f"{src.name} -> {dst.name}"
        failures = []
        for shape in self.shapes:
            label = f"{dtype} {shape} {layout}"
            outcome = _run(
                self,
                group,
                label,
                (src.name, dst.name),
                pair_case,
                src.name,
                dst.name,
                dtype,
                list(shape),
                layout,
                self.device,
            )
            if outcome.failure == NOT_RUN:
                failures.append(f"shapes from {shape} on: {outcome.error}")
                break
            if not outcome.ok:
                detail = ""
                if outcome.failure in (DIED, HUNG) and outcome.detail:
                    detail = "\n      " + outcome.detail.replace("\n", "\n      ")
                failures.append(f"shape {shape}: {outcome.error}{detail}")
        assert not failures, f"{group} {dtype} {layout}:\n" + "\n".join(failures)

    @pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
    def test_capsule_released_once(self, target: Adapter, versioned: bool) -> None:
        self._host_memory_only()
        kind = "versioned" if versioned else "legacy"
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                f"{kind} capsule released once",
                (target.name,),
                release_once,
                target.name,
                versioned,
            )
        )

    def test_read_only_memory(self, target: Adapter) -> None:
        self._host_memory_only()
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "read-only memory",
                (target.name,),
                read_only_memory,
                target.name,
            )
        )

    def test_first_plan_imports(self, target: Adapter) -> None:
        """A route into the framework is remembered in a process whose first conversion
        imports it (`first_plan_imports`)."""
        self._host_memory_only()
        if target.name == "numpy":
            pytest.skip("NumPy is the source: its arrays convert into other frameworks")
        recipe = None
        if not _from_entry_point(target):
            recipe = worker_recipe(target)
            if isinstance(recipe, str):
                pytest.skip(f"{target.name} is registered at run time and {recipe}")
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "first plan imports",
                (target.name,),
                first_plan_imports,
                target.name,
                recipe and list(recipe),
            )
        )

    def test_copy_hook(self, target: Adapter) -> None:
        self._host_memory_only()
        _assert_ok(
            _run(self, f"into {target.name}", "copy hook", (target.name,), copy_hook, target.name)
        )

    def test_declared_gaps_refused(self, target: Adapter) -> None:
        self._host_memory_only()
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "declared gaps refused",
                (target.name,),
                declared_gaps_refused,
                target.name,
                list(self.dtypes),
            )
        )

    def test_declared_gaps_are_real(self, target: Adapter) -> None:
        """A dtype the adapter refuses must be one its framework cannot import faithfully
        (handed the capsule directly, it fails or changes the dtype or the values)."""
        others = [a.name for a in usable_adapters(_device(self.device)) if a is not target]
        names = (target.name, *others)
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "declared gaps are real",
                names,
                declared_gaps_are_real,
                target.name,
                list(self.dtypes),
                self.device,
            )
        )

    def test_grad_hooks(self, target: Adapter) -> None:
        """Adapters that bring gradients (`grad_source()`, `grad_target()`) keep the hooks'
        contract, and a function wrapped through them has the right value and gradient."""
        if not isinstance(target, Gradients):
            pytest.skip(f"{target.name} declares no Gradients role")
        if _device(self.device) != CPU:
            pytest.skip("the gradient round trip is on the host: the CPU suite runs it")
        partner = grad_partner(target, usable_adapters())
        names = (target.name, *([partner.name] if partner is not None else []))
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "gradient hooks",
                names,
                grad_hooks,
                target.name,
                partner.name if partner is not None else None,
            )
        )
        if partner is None:
            missing = "target" if target.grad_source() is not None else "source"
            pytest.skip(
                f"hooks checked; no installed framework brings the gradient {missing} that a "
                f"round trip with {target.name} needs"
            )

    def test_capsule_boxes_hook(self, target: Adapter) -> None:
        """Adapters that make boxes for the pure release runtime (`capsule_boxes`) make
        capsules their framework reads and that release the tensor once."""
        if not isinstance(target, CapsuleBoxes):
            pytest.skip(f"{target.name} declares no CapsuleBoxes role")
        self._host_memory_only()
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "capsule_boxes() hook",
                (target.name,),
                capsule_boxes_hook,
                target.name,
            )
        )

    def test_tree_node_hook(self, target: Adapter) -> None:
        """Adapters that bring tree nodes (`Adapter.tree_node()`) keep the hook's contract."""
        if not isinstance(target, PytreeNodes):
            pytest.skip(f"{target.name} declares no PytreeNodes role")
        self._host_memory_only()
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "tree_node() hook",
                (target.name,),
                tree_node_hook,
                target.name,
            )
        )

    def test_sharded_hook(self, target: Adapter) -> None:
        """Adapters that bring sharded arrays (`Adapter.sharded()`) keep the hook's contract."""
        if not isinstance(target, Sharding):
            pytest.skip(f"{target.name} declares no Sharding role")
        _assert_ok(
            _run(
                self,
                f"into {target.name}",
                "sharded() hook",
                (target.name,),
                sharded_hook,
                target.name,
            )
        )
