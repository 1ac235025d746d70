"""The MXNet adapter against real MXNet 1.9 arrays, and its NumPy 2 compatibility shim."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys

import pytest

import interop
from interop.registry import REGISTRY
from interop.testing import COUNTER, counting_capsule, explain_or_raise

interop_mxnet = pytest.importorskip("interop_mxnet")
if importlib.util.find_spec("mxnet") is None:
    pytest.skip("mxnet is not installed", allow_module_level=True)

import numpy as np  # noqa: E402
from interop_mxnet import numpy_compat  # noqa: E402

mx = interop_mxnet.import_mxnet()
ADAPTER = REGISTRY.get("mxnet")


def usable_torch():
    """torch when its adapter is usable here (not in the NumPy 1 environment), else None."""
    try:
        if REGISTRY.get("torch").unavailable() is None:
            import torch

            return torch
    except interop.InteropError:
        pass
    return None


def addr(x):
    if isinstance(x, np.ndarray):
        return x.__array_interface__["data"][0]
    if isinstance(x, mx.nd.NDArray):
        return ADAPTER.data_address(x)
    return x.data_ptr()  # torch


# --- the NumPy compatibility shim ------------------------------------------------------------
SHIM_PROBE = """
import json, numpy
from interop_mxnet import numpy_compat
before = dict(vars(numpy))
missing = numpy_compat.missing()
added = numpy_compat.apply()
after = dict(vars(numpy))
again = numpy_compat.apply()
changed = sorted(k for k, v in before.items() if after.get(k) is not v)
new = sorted(set(after) - set(before))
import numpy.ma
masked = int(numpy.ma.masked_array([1, 2, 3], mask=[0, 1, 0]).sum())
import mxnet
print(json.dumps({"numpy": numpy.__version__, "missing": missing, "added": added,
                  "again": again, "changed": changed, "new": new, "masked": masked,
                  "bool_is_numpys": numpy.bool is numpy.bool_,
                  "mxnet": mxnet.__version__}))
"""


def _probe_shim(pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", SHIM_PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_shim_adds_only_missing_names_and_never_replaces_one():
    found = _probe_shim()
    assert found["added"] == found["missing"] and set(found["added"]) <= set(numpy_compat.NAMES)
    assert found["new"] == sorted(found["added"]), "added a name it did not report"
    assert found["changed"] == [], f"replaced NumPy's own {found['changed']}"
    assert found["again"] == [], "a second apply() added names again"
    assert found["masked"] == 4, "numpy.ma broke"
    assert found["mxnet"] == mx.__version__
    if found["numpy"].split(".")[0] >= "2":
        assert "bool" not in found["added"] and found["bool_is_numpys"]
        assert {"PZERO", "alltrue", "in1d", "mirr", "trapz"} <= set(found["added"])


@pytest.mark.skipif(not np.__version__.startswith("2"), reason="NumPy < 2 imports MXNet itself")
def test_mxnet_does_not_import_under_numpy2_without_the_shim():
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "import mxnet"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "AttributeError" in done.stderr


def test_shim_under_numpy1_when_one_is_provided():
    """INTEROP_NUMPY1_PATH: a folder holding NumPy < 2 (pip install --target DIR 'numpy<2')."""
    path = os.environ.get("INTEROP_NUMPY1_PATH")
    if not path:
        pytest.skip("set INTEROP_NUMPY1_PATH to a folder with NumPy < 2 to run this here")
    found = _probe_shim(path)
    assert found["numpy"].startswith("1.")
    assert found["changed"] == [] and found["new"] == sorted(found["added"])
    assert set(found["added"]) <= {"bool"}, "NumPy 1.x has every other name"
    assert found["masked"] == 4


def test_restored_names_keep_their_numpy1_meaning():
    assert np.PZERO == 0.0 and np.NINF == -np.inf and np.isnan(np.NaN) and np.Inf == np.inf
    assert np.in1d([[1, 2], [3, 4]], [2, 3]).tolist() == [False, True, True, False]
    assert np.msort(np.array([[3, 1], [1, 2]])).tolist() == [[1, 1], [3, 2]]
    assert np.product([2, 3]) == 6 and np.alltrue([1, 1]) and np.sometrue([0, 1])
    assert np.round_(1.26, 1) == 1.3 and np.trapz([1.0, 1.0]) == 1.0
    assert np.all is not np.alltrue, "an alias would replace numpy.all's MXNet dispatch entry"
    with pytest.raises(RuntimeError, match="numpy_financial"):
        np.pmt(0.05, 10, 1000)


# --- dtypes ----------------------------------------------------------------------------------
def test_booleans_cross_both_ways_as_real_booleans_zero_copy():
    x = mx.nd.array([1, 0, 1, 1], dtype="bool")
    assert interop.inspect(x).dtype == "bool"  # not MXNet's own uint1 label
    a = interop.convert(x, "numpy")
    assert a.dtype == np.bool_ and a.tolist() == [True, False, True, True]
    assert addr(a) == addr(x)
    torch = usable_torch()
    if torch is not None:
        t = interop.convert(x, "torch")
        assert t.dtype == torch.bool and t.tolist() == [True, False, True, True]
        assert addr(t) == addr(x)

    src = np.array([True, False, False, True])
    y = interop.convert(src, "mxnet")
    assert y.dtype == np.bool_ and y.asnumpy().tolist() == src.tolist()
    assert addr(y) == addr(src) and interop.explain(src, "mxnet").zero_copy
    y[1] = True
    y.wait_to_read()
    assert src.tolist() == [True, True, False, True], "MXNet's write did not reach NumPy"


@pytest.mark.parametrize("dtype", ["bfloat16", "complex128", "complex64", "int16", "uint32"])
def test_dtypes_mxnet_lacks_are_refused_before_it_sees_them(dtype):
    torch = usable_torch()
    sources = [torch.zeros(4, dtype=getattr(torch, dtype))] if torch else []
    if dtype != "bfloat16":
        sources.append(np.zeros(4, dtype=dtype))
    for x in sources:
        with pytest.raises(interop.UnsupportedDTypeError, match=f"mxnet.*{dtype}"):
            interop.convert(x, "mxnet")
    # complex128 would make MXNet raise UnicodeDecodeError; bfloat16 it would take as void16
    capsule, address = counting_capsule(bytes(4 * 16), dtype, (4,), versioned=False)
    with pytest.raises(interop.UnsupportedDTypeError, match=dtype) as refused:
        interop.convert(capsule, "mx")
    if dtype == "bfloat16":  # the declared reason, not just "holds no bfloat16"
        assert "raw void16 bytes" in str(refused.value)
    del capsule, refused  # the traceback holds the capsule too
    gc.collect()
    assert COUNTER.released(address) == 1


# --- layouts, offsets, sizes -----------------------------------------------------------------
def test_non_canonical_layouts_are_copied_with_the_reason():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    plan = interop.explain(a, "mxnet")
    assert plan.copy_at == "source" and "canonical" in str(plan)
    assert interop.convert(a, "mxnet").asnumpy().tolist() == a.tolist()
    with pytest.raises(interop.CopyForbiddenError, match="canonical"):
        interop.convert(a, "mxnet", copy=False)
    # an odd stride on a size-1 dimension: "contiguous" for most importers, not for MXNet
    payload = np.arange(3, dtype=np.float32).tobytes()
    capsule, address = counting_capsule(payload, "float32", (3, 1), strides=(1, 3))
    assert not interop.explain(capsule, "mxnet").zero_copy
    assert interop.convert(capsule, "mxnet").asnumpy().tobytes() == payload
    del capsule
    gc.collect()
    ADAPTER.synchronize()
    assert COUNTER.released(address) == 1


def test_byte_offset_is_never_handed_to_mxnet():
    payload = np.arange(12, dtype=np.float32).tobytes()
    capsule, address = counting_capsule(payload, "float32", (3, 4), byte_offset=64)
    plan = interop.explain(capsule, "mxnet")
    assert not plan.zero_copy and "byte_offset" in str(plan)
    y = interop.convert(capsule, "mxnet")
    assert y.asnumpy().tobytes() == payload  # MXNet itself would read from `data`, 64 early
    del y, capsule
    gc.collect()
    assert COUNTER.released(address) == 1


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0)])
@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_zero_size_tensors_arrive_with_shape_and_dtype(shape, dtype):
    torch = usable_torch()  # torch's zeros(3, 0) has strides (1, 1), which MXNet rejects
    sources = [np.zeros(shape, dtype=dtype)]
    if torch is not None:
        sources.append(torch.zeros(shape, dtype=getattr(torch, dtype)))
    for x in sources:
        y = interop.convert(x, "mxnet")
        assert y.shape == shape and np.dtype(y.dtype) == np.dtype(dtype)
    back = interop.convert(y, "numpy")
    assert back.shape == shape and back.dtype == np.dtype(dtype)


# --- sources and results ---------------------------------------------------------------------
def test_mx_np_arrays_are_sources_and_results_become_mx_np_without_a_copy():
    x = mx.np.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    a = interop.convert(x, "numpy", copy=False)
    assert addr(a) == addr(x) and a.tolist() == x.asnumpy().tolist()
    torch = usable_torch()
    if torch is not None:
        assert addr(interop.convert(x, "torch", copy=False)) == addr(x)
    source = np.arange(4.0)
    y = interop.convert(source, "mxnet")
    assert type(y) is mx.nd.NDArray
    z = y.as_np_ndarray()
    assert isinstance(z, mx.np.ndarray) and addr(z) == addr(source)


def test_sparse_arrays_are_refused_not_exported_as_their_values():
    csr = mx.nd.array([[1, 0], [0, 2]]).tostype("csr")
    with pytest.raises(interop.UnsupportedTensorError, match="csr"):
        interop.convert(csr, "numpy")


def test_pending_engine_writes_finish_before_another_framework_reads():
    x = mx.nd.zeros((1 << 22,))
    for _ in range(20):
        x += 1  # queued on MXNet's asynchronous engine
    plan = interop.explain(x, "numpy")
    assert any("engine" in note for note in plan.notes)
    a = interop.convert(x, "numpy")
    assert float(a.min()) == 20.0 and float(a.max()) == 20.0


def test_writes_through_results_reach_mxnet():
    x = mx.nd.zeros((3, 4))
    a = interop.convert(x, "numpy")
    if a.flags.writeable:  # NumPy < 2.1 marks every array it imports read-only
        a[0, 1] = 5
        assert x.asnumpy()[0, 1] == 5
    torch = usable_torch()
    if torch is None:
        pytest.skip("no usable torch: the writable consumer case needs it")
    interop.convert(x, "torch")[1, 2] = 7  # a writable consumer: to_dlpack_for_write
    assert x.asnumpy()[1, 2] == 7


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_warm_routes_make_numpy_results_writable_as_the_plan_does(compiled):
    # NumPy marks arrays from legacy capsules read-only, and MXNet exports only those: the
    # plan makes the result writable on arrival; a warm route (pure Python too) must as well
    from interop.api import HUB, make_convert
    from interop.capsule import live_bridges
    from interop.engine import Hub

    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip("NumPy < 2.1 reads legacy capsules only, which it keeps writable")
    hub = Hub(HUB.registry, compiled=compiled)
    convert = make_convert(hub)
    plan = hub.explain(mx.nd.zeros((3, 4)), "numpy")
    assert [getattr(s, "writable", None) for s in plan.steps if s.action == "import"] == [True]
    before = live_bridges()
    for i in range(4):
        x = mx.nd.zeros((3, 4))
        a = convert(x, "numpy")
        assert a.flags.writeable and a.ctypes.data == ADAPTER.data_address(x)
        a[1, 2] = i + 1
        assert x.asnumpy()[1, 2] == i + 1
        del a, x
        gc.collect()
    assert "numpy" in hub.routes.table[type(mx.nd.zeros((3, 4)))], "the route was not learned"
    assert live_bridges() == before, "a bridged tensor was not released"


def test_data_address_is_mxnets_own_pointer():
    x = mx.nd.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert ADAPTER.data_address(x) == interop.inspect(x).address
    assert ADAPTER.data_address(x[1:]) == ADAPTER.data_address(x) + 16  # a view, one row on


def test_device_moves():
    x = mx.nd.array([1.0, 2.0])
    assert ADAPTER.to_device(x, interop.Device("cpu")).asnumpy().tolist() == [1.0, 2.0]
    if mx.context.num_gpus() == 0:
        with pytest.raises(interop.DeviceError, match="MXNet"):
            ADAPTER.to_device(x, interop.Device("cuda"))


def test_listed_as_loaded_with_its_version():
    (info,) = [i for i in interop.adapters() if i.name == "mxnet"]
    assert info.status == "loaded" and info.framework_version == mx.__version__
    assert info.unavailable is None and info.dlpack == "legacy"
    assert REGISTRY.get("mx") is ADAPTER


# --- the fast path's importer --------------------------------------------------------------------
def test_the_fast_importer_makes_mxnets_c_calls_and_shares():
    importer = ADAPTER.importer(False, "float32")
    assert importer is not mx.nd.from_dlpack  # the leaner call is in use
    payload = np.arange(12, dtype=np.float32).tobytes()
    capsule, address = counting_capsule(payload, "float32", (3, 4), versioned=False)
    y = importer(capsule)
    assert type(y) is mx.nd.NDArray and y.shape == (3, 4) and y.dtype == np.float32
    assert ADAPTER.data_address(y) == interop.inspect(y).address
    assert (y * 2).sum().asscalar() == 132.0  # MXNet's own kernels on the imported memory
    y += 1  # writable, as mx.nd.from_dlpack's results are
    assert y.asnumpy()[2, 3] == 12.0
    with pytest.raises(interop.DLPackError, match="already consumed"):
        importer(capsule)  # renamed used: a second import is refused, typed
    assert COUNTER.released(address) == 0
    del y
    ADAPTER.synchronize()
    gc.collect()
    assert COUNTER.released(address) == 1  # MXNet released it, once


def test_the_fast_importer_refuses_what_mxnet_refuses_and_keeps_the_capsule():
    importer = ADAPTER.importer(False, "float32")
    capsule, address = counting_capsule(bytes(4 * 16), "int16", (16,), versioned=False)
    with pytest.raises(mx.base.MXNetError):  # the full path turns this into a typed error
        importer(capsule)
    assert interop.inspect(capsule).dtype == "int16"  # not consumed: still the caller's
    del capsule
    gc.collect()
    assert COUNTER.released(address) == 1


# --- the fast path's exports and fingerprint ------------------------------------------------------
@pytest.mark.parametrize("writable", [False, True], ids=["read", "write"])
def test_the_fast_exports_give_what_mxnets_exports_give(writable):
    export = ADAPTER.exporter(False, writable, "float32")
    public = mx.nd.to_dlpack_for_write if writable else mx.nd.to_dlpack_for_read
    assert export is not public and export is ADAPTER.exporter(False, writable, "float32")
    x = mx.nd.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    fast = export(x)
    assert interop.inspect(fast) == interop.inspect(public(x))
    assert interop.inspect(fast).address == ADAPTER.data_address(x)
    torch, total = usable_torch(), 66.0
    if torch is not None:  # another framework computes on the exported memory, and writes it
        t = torch.from_dlpack(fast)
        assert float((t * 2).sum()) == 132.0
        t[0, 0] = 7.0
        assert x.asnumpy()[0, 0] == 7.0
        total = 73.0
    unused = export(x)
    del unused  # an unconsumed capsule releases its tensor through MXNet's own destructor
    gc.collect()
    assert x.asnumpy().sum() == total


def test_the_fingerprint_is_remembered_per_handle_and_never_confused():
    arrays = [
        mx.nd.ones((3, 4), dtype="float32"),
        mx.nd.ones((5,), dtype="int32"),
        mx.nd.ones((2, 2), dtype="float64"),
    ]
    prints = [ADAPTER.fingerprint(a) for a in arrays]
    assert len(set(prints)) == 3  # three dtypes, three fingerprints
    assert [ADAPTER.fingerprint(a) for a in arrays] == prints  # remembered: the same again
    assert [a[0] for a in prints] == [0, 4, 1]  # MXNet's dtype codes: float32, int32, float64
    with mx.util.np_shape(True):  # MXNet makes zero-size arrays with NumPy shapes only
        empty = mx.nd.zeros((0, 4))
        assert ADAPTER.fingerprint(empty) is None  # empty: the full path
    for _ in range(50):  # arrays die and new handles are made: each gets its own fingerprint
        a = mx.nd.ones((4,), dtype="float32")
        b = mx.nd.ones((4,), dtype="int64")
        assert ADAPTER.fingerprint(a) == prints[0] and ADAPTER.fingerprint(b)[0] == 6
        del a, b
    assert len(interop_mxnet._FINGERPRINTS.known) <= interop_mxnet._PerHandle.KEPT


def test_the_fast_address_is_remembered_per_handle_and_stays_mxnets_own():
    x = mx.nd.empty((1000,))  # allocated at its first use
    first = ADAPTER.fast_address(x)
    x[:] = 3
    x += 1
    mx.nd.elemwise_add(x, x, out=x)
    x.attach_grad()
    x.wait_to_read()
    assert ADAPTER.fast_address(x) == first == ADAPTER.data_address(x)  # MXNet's own word
    views = [x[10:], x.reshape((10, 100)), x[1:]]
    assert [ADAPTER.fast_address(v) for v in views] == [first + 40, first, first + 4]
    assert [ADAPTER.fast_address(v) for v in views] == [ADAPTER.data_address(v) for v in views]


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_writable_result_waits_for_mxnets_pending_reads(compiled):
    # MXNet's engine reads asynchronously: a writable alias must wait for the reads already
    # queued (to_dlpack_for_write), or a write through it changes what they read. NumPy's
    # results of MXNet memory are writable (bridged): they were read exports, and the dot
    # below came out wrong in 20 of 20 tries.
    from interop.api import HUB, make_convert
    from interop.engine import Hub

    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    convert = make_convert(Hub(HUB.registry, compiled=compiled))
    targets = ["numpy"] + (["torch"] if usable_torch() is not None else [])
    for target in targets:
        for _ in range(3):  # the first plans the conversion, the others take the route
            x = mx.nd.ones((800, 800))
            x.wait_to_read()
            product = mx.nd.dot(x, x)  # queued: reads x while the conversion runs
            alias = convert(x, target)
            if target == "numpy" and not alias.flags.writeable:  # NumPy < 2.1: legacy only
                assert np.lib.NumpyVersion(np.__version__) < "2.1.0"
                continue
            alias[:] = 0  # a write through the result, at once
            assert product.asnumpy()[0, 0] == 800.0, f"{target}: the write reached the dot"


def test_a_0d_tensor_into_mxnet_is_refused_by_explain_and_convert_saying_what_to_do():
    x = np.array(1.5, dtype=np.float32)
    legacy = mx.nd.array(x)  # the oracle: MXNet's own 0-d NDArray fails its first kernel
    with pytest.raises(mx.base.MXNetError, match="inferring shapes failed"):
        (legacy + 7).asnumpy()
    for _ in range(3):  # a route learned from a 2-D array must not take the 0-d one
        interop.convert(np.ones((2, 3), np.float32), "mxnet")
    for call in (explain_or_raise, interop.convert):
        with pytest.raises(interop.UnsupportedLayoutError, match=r"mxnet cannot .*x\.reshape\(1\)"):
            call(x, "mxnet")
    y = interop.convert(x.reshape(1), "mxnet")  # what the message says to do: usable
    assert (y + 7).asnumpy().tolist() == [8.5]


NUMPY_SEMANTICS = r"""
import sys, numpy as np, interop
from interop_mxnet import import_mxnet
mx = import_mxnet()
def into_mxnet(x):
    try:
        return interop.convert(x, "mxnet")
    except interop.UnsupportedLayoutError as exc:
        assert "mx.npx.set_np()" in str(exc) and "x.reshape(1)" in str(exc), exc
        plan = interop.explain(x, "mxnet")
        assert isinstance(plan.error, interop.UnsupportedLayoutError), plan
        return "refused"
for _ in range(3):  # a route learned from a 1-D array: 0-d ones are planned past it
    interop.convert(np.ones(3, np.float32), "mxnet")
x = np.array(1.5, np.float32)
seen = [into_mxnet(x)]
for turn in ("on", "off", "on"):  # process-wide: the answer follows it on every call
    mx.npx.set_np() if turn == "on" else mx.npx.reset_np()
    for _ in range(2):
        y = into_mxnet(x)
        if isinstance(y, str):
            seen.append(y)
            continue
        assert interop.explain(x, "mxnet").error is None
        z = y.as_np_ndarray()  # MXNet's own kernels take it: a 0-d result
        assert z.shape == () and float(mx.np.sum(z * 2)) == 3.0
        x[()] = 2.5  # shared memory: MXNet reads the write
        assert float(z.asnumpy()) == 2.5
        x[()] = 1.5
        seen.append("0-d")
print(" ".join(seen))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_0d_tensor_converts_while_mxnets_numpy_semantics_are_on(pure):
    # mx.npx.set_np() is process-wide: a process of its own
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", NUMPY_SEMANTICS],
        capture_output=True,
        text=True,
        env={**os.environ, "INTEROP_PURE_PYTHON": pure},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["refused", "0-d", "0-d", "refused", "refused", "0-d", "0-d"]


PENDING_FAILURE = r"""
import sys, numpy as np, interop
from interop_mxnet import import_mxnet
mx = import_mxnet()
for target in sys.argv[1:]:
    bits = mx.nd.array(np.array([[1, 0, 1], [0, 1, 1]], np.uint8)).astype("bool")
    pending = bits.T  # MXNet's transpose has no bool kernel: it fails in the engine, later
    try:
        interop.convert(pending, target)
    except interop.UnsupportedTensorError as exc:
        assert isinstance(exc, RuntimeError), type(exc).__mro__  # as MXNetError is
        assert "mxnet could not export" in str(exc) and "MXNetError" in str(exc), exc
        print(target, "refused")
    else:
        print(target, "converted")
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_an_operation_failing_in_mxnets_engine_is_a_typed_refusal(pure):
    # waiting on the array raises the pending operation's MXNetError: it reached the caller
    # raw (and its asnumpy() raises it too, so the values are never handed over)
    targets = [t for t in ("numpy", "torch") if REGISTRY.get(t).unavailable() is None]
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PENDING_FAILURE, *targets],
        capture_output=True,
        text=True,
        env={**os.environ, "INTEROP_PURE_PYTHON": pure},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [w for t in targets for w in (t, "refused")], done.stdout
