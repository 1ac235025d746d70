"""The cross-framework conformance suite, as a test class a plugin's tests subclass.

Every ordered pair that involves `framework` (every pair of installed frameworks when it is
None) is checked across dtypes, shapes and layouts: values equal bit for bit through the
frameworks' own oracles (`Adapter.to_bytes`), zero-copy proven by data address exactly where
`explain` promises it, `copy=False` and `copy=True` honoured, writes through shared results
visible to writable sources, declared gaps refused with the library's own errors, and memory
given through DLPack released exactly once.
"""

from __future__ import annotations

import gc
import math
from typing import Any, ClassVar

import pytest

import interop
from interop.adapter import WRITABLE, Adapter
from interop.dlpack import dtype_bits
from interop.engine import deliver_unplanned
from interop.exchange import Exchange
from interop.info import CPU
from interop.registry import REGISTRY

from .counting import COUNTER, counting_capsule

DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 bfloat16 float32 float64 complex64 complex128"
).split()
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
LAYOUTS = ("contiguous", "transposed", "step-sliced", "offset", "negative")


def usable_adapters() -> list[Adapter]:
    """Adapters that load and convert CPU tensors here, by name (GPU-only frameworks such as
    CuPy are left to the CUDA tests)."""
    return sorted(
        (
            a
            for a in REGISTRY.loaded()
            if a.unavailable() is None
            and "cpu" in a.capabilities().devices
            and a.device_unavailable(CPU) is None
        ),
        key=lambda a: a.name,
    )


def _itemsize(adapter: Adapter, x: Any, size: int) -> int:
    return len(adapter.to_bytes(x)) // size if size else 0


def check_pair(src: Adapter, dst: Adapter, dtype: str, shape: tuple[int, ...], layout: str) -> str:
    """Convert one case every way and assert; returns what happened ("zero-copy", ...)."""
    try:
        x = src.sample(dtype, shape)
    except Exception as exc:  # the source framework cannot make this dtype at all
        return f"n/a ({src.name} cannot make {dtype}: {type(exc).__name__})"
    if layout != "contiguous":
        if len(shape) < (2 if layout == "transposed" else 1):
            return "n/a"
        views = src.views(x)
        if layout not in views:
            return "n/a"
        x = views[layout]
    expected = src.to_bytes(x)
    view_shape = tuple(int(n) for n in x.shape)
    size = math.prod(view_shape)
    try:
        plan = interop.explain(x, dst.name)
    except interop.UnsupportedDTypeError as exc:
        assert dtype in str(exc), f"the error does not name the dtype: {exc}"
        declared = dtype not in dst.capabilities().import_dtypes or dst.refusal(interop.inspect(x))
        assert declared or dtype not in src.capabilities().export_dtypes, (
            f"{src.name} -> {dst.name} refused {dtype} without a declared gap: {exc}"
        )
        with pytest.raises(interop.UnsupportedDTypeError):
            interop.convert(x, dst.name)
        return "unsupported dtype"

    y = interop.convert(x, dst.name)
    assert tuple(int(n) for n in y.shape) == view_shape, "shape changed"
    got = dst.to_bytes(y)
    assert got == expected, "values differ"
    shared = size > 0 and dst.data_address(y) == src.data_address(x)
    if size and expected:
        assert shared == plan.zero_copy, f"explain said zero_copy={plan.zero_copy}:\n{plan}"

    if plan.zero_copy:
        again = interop.convert(x, dst.name, copy=False)
        assert dst.to_bytes(again) == expected
        if size and expected:
            assert dst.data_address(again) == src.data_address(x), "copy=False did not share"
    else:
        with pytest.raises(interop.CopyForbiddenError) as info:
            interop.convert(x, dst.name, copy=False)
        assert isinstance(info.value, BufferError)

    fresh = interop.convert(x, dst.name, copy=True)
    assert dst.to_bytes(fresh) == expected, "copy=True changed values"
    if size and expected:
        assert dst.data_address(fresh) != src.data_address(x), "copy=True shared memory"

    if shared and not src.capabilities().immutable and dst.mutate(y):
        after = src.to_bytes(x)
        assert after == dst.to_bytes(y), "a write through the result is not seen by the source"
        width = _itemsize(dst, y, size)
        if expected[:width] != after[:width]:
            return "zero-copy, write seen"
    return "zero-copy" if plan.zero_copy else "copied"


def _release_once(dst: Adapter, versioned: bool, read_only: bool = False) -> None:
    payload = bytes(range(48))
    capsule, address = counting_capsule(
        payload, "float32", (3, 4), versioned=versioned, read_only=read_only
    )
    try:
        y = interop.convert(capsule, dst.name)
        assert dst.to_bytes(y) == payload
        del y
    finally:
        del capsule
        gc.collect()
    dst_sync = getattr(dst, "synchronize", None)
    if dst_sync:
        dst_sync()
    gc.collect()
    assert COUNTER.released(address) == 1, (
        f"{dst.name} released the memory " + str(COUNTER.released(address)) + " times"
    )


class ConformanceSuite:
    """Subclass with `framework = "<your adapter's name>"` to run the kit against it."""

    framework: ClassVar[str | None] = None
    dtypes: ClassVar[tuple[str, ...] | list[str]] = DTYPES
    shapes: ClassVar[tuple[tuple[int, ...], ...]] = SHAPES
    layouts: ClassVar[tuple[str, ...]] = LAYOUTS

    def pytest_generate_tests(self, metafunc: Any) -> None:
        adapters = usable_adapters()
        names = [a.name for a in adapters]
        if self.framework is not None and self.framework not in names:
            reason = REGISTRY.get(self.framework).unavailable() if self.framework else None
            metafunc.parametrize(
                "pair",
                [
                    pytest.param(
                        None,
                        marks=pytest.mark.skip(
                            reason=reason or f"{self.framework} is not usable here"
                        ),
                    )
                ],
            )
            return
        involved = [a for a in adapters if self.framework in (None, a.name)]
        if "pair" in metafunc.fixturenames:
            pairs = [
                (s, d)
                for s in adapters
                for d in adapters
                if s is not d and (s in involved or d in involved)
            ]
            metafunc.parametrize("pair", pairs, ids=[f"{s.name}-{d.name}" for s, d in pairs])
        if "target" in metafunc.fixturenames:
            metafunc.parametrize("target", involved, ids=[a.name for a in involved])
        if "dtype" in metafunc.fixturenames:
            metafunc.parametrize("dtype", list(self.dtypes))
        if "layout" in metafunc.fixturenames:
            metafunc.parametrize("layout", list(self.layouts))

    def test_pair(self, pair: tuple[Adapter, Adapter], dtype: str, layout: str) -> None:
        src, dst = pair
        failures = []
        for shape in self.shapes:
            try:
                check_pair(src, dst, dtype, shape, layout)
            except Exception as exc:
                failures.append(f"shape {shape}: {type(exc).__name__}: {exc}")
        assert not failures, f"{src.name} -> {dst.name} {dtype} {layout}:\n" + "\n".join(failures)

    @pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
    def test_capsule_released_once(self, target: Adapter, versioned: bool) -> None:
        _release_once(target, versioned)

    def test_read_only_memory(self, target: Adapter) -> None:
        payload = bytes(range(48))
        capsule, address = counting_capsule(payload, "float32", (3, 4), read_only=True)
        plan = interop.explain(capsule, target.name)
        if target.capabilities().import_access == WRITABLE:
            assert not plan.zero_copy, "read-only memory would reach a writable consumer"
            with pytest.raises(interop.CopyForbiddenError):
                interop.convert(capsule, target.name, copy=False)
        y = interop.convert(capsule, target.name)
        assert target.to_bytes(y) == payload
        if target.mutate(y):
            assert not plan.zero_copy
        del y, capsule
        gc.collect()
        assert COUNTER.released(address) == 1

    def test_declared_gaps_refused(self, target: Adapter) -> None:
        missing = [d for d in self.dtypes if d not in target.capabilities().import_dtypes]
        for dtype in missing:
            width = max(dtype_bits(dtype) // 8, 1)
            capsule, address = counting_capsule(bytes(4 * width), dtype, (4,))
            with pytest.raises(interop.UnsupportedDTypeError, match=dtype):
                interop.convert(capsule, target.name)
            del capsule
            gc.collect()
            assert COUNTER.released(address) == 1, f"{dtype}: refused capsule leaked"

    def test_declared_gaps_are_real(self, target: Adapter) -> None:
        """A dtype the adapter refuses must be one its framework cannot import faithfully:
        handed the capsule directly (no plan), the framework must fail or change the dtype
        or the values. Otherwise the library would refuse what the frameworks support."""
        caps = target.capabilities()
        false_gaps = []
        refused = (d for d in self.dtypes if d not in caps.import_dtypes)
        for dtype in (d for d in refused if d not in caps.import_gaps):  # gaps with a reason
            for src in usable_adapters():
                if src is target or dtype not in src.capabilities().export_dtypes:
                    continue
                try:
                    x = src.sample(dtype, (4,))
                    exchange = Exchange.from_source(
                        src.export(x), versioned=caps.wants_versioned, framework=src.name
                    )
                except Exception:
                    continue  # the source cannot make or export it here
                expected = src.to_bytes(x)
                try:
                    y = deliver_unplanned(exchange, target)
                    same = interop.inspect(y).dtype == dtype and target.to_bytes(y) == expected
                except Exception:
                    same = False
                if same:
                    false_gaps.append(f"{src.name} -> {target.name} {dtype}")
                break  # one source that exports it is enough
        assert not false_gaps, f"{target.name} declares gaps its framework does not have: " + (
            ", ".join(false_gaps)
        )
