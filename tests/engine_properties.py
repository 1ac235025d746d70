"""Properties of the conversion engine, checked with hypothesis over real frameworks.

Run in a subprocess by tests/test_engine.py (a wrong plan can abort the process: then one
test fails, not the run). By hand: `python -m pytest tests/engine_properties.py`.
INTEROP_PROPERTY_EXAMPLES sets how many examples each property tries (CI: 150).
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interop
from interop import capsule as cap
from interop.api import HUB
from interop.engine import Conversion
from interop.info import read_capsule
from interop.plan import Note
from interop.testing import counting_capsule, usable_adapters

np = pytest.importorskip("numpy")

EXAMPLES = int(os.environ.get("INTEROP_PROPERTY_EXAMPLES", "150"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
ADAPTERS = usable_adapters()
NAMES = [a.name for a in ADAPTERS]
DTYPES = ["bool", "int8", "int32", "int64", "uint16", "float16", "float32", "float64", "complex64"]
LAYOUTS = ["contiguous", "transposed", "step-sliced", "offset", "negative"]
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (3, 1), (1, 4), (0, 3), (3, 0), (0,), (2, 0, 3)]


def make(src: interop.Adapter, dtype: str, shape: tuple[int, ...], layout: str) -> object | None:
    try:
        x = src.sample(dtype, shape)
    except Exception:
        return None
    if layout == "contiguous":
        return x
    if len(shape) < (2 if layout == "transposed" else 1) or 0 in shape:
        return None
    return src.views(x).get(layout)


def shared(src: interop.Adapter, x: object, dst: interop.Adapter, y: object) -> bool | None:
    if not math.prod(int(n) for n in getattr(x, "shape", ())) or not src.to_bytes(x):
        return None  # nothing addressed: sharing cannot be told
    return bool(dst.data_address(y) == src.data_address(x))


@PROPERTY
@given(
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
    st.sampled_from(DTYPES),
    st.sampled_from(SHAPES),
    st.sampled_from(LAYOUTS),
    st.sampled_from([None, True, False]),
    st.sampled_from([None, "cpu"]),
)
def test_convert_runs_exactly_what_explain_says(source, target, dtype, shape, layout, copy, device):
    src, dst = HUB.registry.get(source), HUB.registry.get(target)
    x = make(src, dtype, shape, layout)
    if x is None:
        return
    HUB.routes.clear()  # the full path, whose steps are traced
    plan = interop.explain(x, target, copy=copy, device=device)
    if plan.error is not None:  # explained, not raised: convert raises that very refusal
        with pytest.raises(type(plan.error)) as refused:
            interop.convert(x, target, copy=copy, device=device)
        assert str(refused.value) == str(plan.error)
        assert str(plan.error) in str(plan) and "refused" in str(plan)
        return
    HUB.trace = []
    try:
        y = interop.convert(x, target, copy=copy, device=device)
        executed = [s for s in HUB.trace if not isinstance(s, Note)]
    finally:
        HUB.trace = None
    assert executed == [s for s in plan.steps if not isinstance(s, Note)], str(plan)
    assert dst.to_bytes(y) == src.to_bytes(x), f"values differ\n{plan}"
    sharing = shared(src, x, dst, y)
    if sharing is not None:
        assert sharing == plan.zero_copy, f"explain said zero_copy={plan.zero_copy}\n{plan}"
    # the second call may take the fast path: the same answer (the first result freed: Paddle
    # holding the memory would make it a copy, see one_import_per_address)
    del y
    again = interop.convert(x, target, copy=copy, device=device)
    assert dst.to_bytes(again) == src.to_bytes(x)
    if sharing is not None:
        assert shared(src, x, dst, again) == plan.zero_copy


def _facts(adapter: interop.Adapter, x: object) -> tuple:
    """What a plan depends on, read the slow way (export, read the capsule), bar the address."""
    conv = Conversion(HUB, x, adapter, adapter.name, adapter, adapter.capabilities())
    exchange = HUB.take(adapter.export(x), adapter.name, interop.plan.Export(adapter.name))
    try:
        facts = HUB.facts(x, adapter, adapter.capabilities(), exchange.info)
    finally:
        exchange.release()
    del conv
    return facts._replace(alignment=0)


def test_equal_fingerprints_mean_equal_facts():
    """The pure-Python fast path's key: tensors it cannot tell apart must plan alike. Every
    source x dtype x shape x layout of the grid (exhaustive: collisions hide in pairs)."""
    seen: dict[object, tuple] = {}
    for source in NAMES:
        adapter = HUB.registry.get(source)
        for dtype in DTYPES:
            for shape in [*SHAPES, (1,), (1, 1), (4, 1, 3), (1, 0)]:
                for layout in LAYOUTS:
                    x = make(adapter, dtype, shape, layout)
                    key = None if x is None else adapter.fingerprint(x)
                    if key is None:
                        continue
                    facts = _facts(adapter, x)
                    first = seen.setdefault((source, key), facts)
                    assert first == facts, (
                        f"{source} fingerprint {key} is coarse:\n{first}\n{facts}"
                    )


@st.composite
def strided_capsules(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(-12, 12), min_size=ndim, max_size=ndim)))
    offset = draw(st.sampled_from([0, 0, 4, 8, 64]))
    shift = draw(st.sampled_from([0, 4, 16, 64]))
    versioned = draw(st.booleans())
    read_only = versioned and draw(st.booleans())
    return shape, strides, offset, shift, versioned, read_only


@pytest.mark.skipif(not HUB.routes.compiled, reason="the compiled accelerator is not built")
@PROPERTY
@given(strided_capsules())
def test_compiled_description_matches_the_python_reader(case):
    from interop import _speedups

    shape, strides, offset, shift, versioned, read_only = case
    payload = bytes(8 * 1024)
    capsule, _ = counting_capsule(
        payload,
        "float32",
        shape,
        strides=strides,
        byte_offset=offset,
        align=64,
        versioned=versioned,
        read_only=read_only,
    )
    if shift:
        address, kind = cap.pointer(capsule)
        cap.managed(address, kind).dl_tensor.data += shift
    info = read_capsule(capsule)
    described = _speedups.describe(capsule)
    data, ndim, dshape, dstrides, off, version, flags = (
        described[i] for i in (0, 3, 7, 8, 9, 10, 11)
    )
    assert (data, off, ndim, dshape or (), dstrides or tuple(info.strides)) == (
        info.data,
        info.byte_offset,
        len(shape),
        shape,
        info.strides,
    )
    assert (version is not None) == versioned and bool(flags & 1) == read_only
    key = _speedups.fingerprint(capsule)
    layouts = interop.info.LAYOUTS
    assert layouts[(key >> 40) & 7] == info.layout
    assert 1 << ((key >> 45) & 7) == info.alignment
    assert bool((key >> 43) & 1) == info.read_only and bool((key >> 44) & 1) == bool(offset)
