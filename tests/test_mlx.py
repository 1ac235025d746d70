"""MLX specifics. The conformance kit runs MLX against every other framework in
tests/test_conformance.py; here are the facts its adapter's declarations rest on, measured with
MLX's own API (the `*_still_*` tests: if one fails, MLX changed and interop_mlx's declaration
must be revisited; docs/frameworks/mlx.md has the measurements), and what the adapter does
about them.
"""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys

import pytest

import interop
from interop.info import read_capsule
from interop.testing import COUNTER, counting_capsule

interop_mlx = pytest.importorskip("interop_mlx")
if importlib.util.find_spec("mlx") is None:
    pytest.skip("mlx is not installed", allow_module_level=True)
np = pytest.importorskip("numpy")
mx = pytest.importorskip("mlx.core")

ADAPTER = interop_mlx.MLXAdapter()


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _exported(x) -> interop.TensorInfo:
    return read_capsule(x.__dlpack__())


# --- MLX as a consumer: mx.from_dlpack copies ------------------------------------------------
def test_mx_from_dlpack_still_copies_host_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = mx.from_dlpack(a)
    assert ADAPTER.data_address(y) != _address(a)
    a[0, 0] = 100  # a later write to the source does not reach the copy
    assert y[0, 0].item() == 0
    with pytest.raises(ValueError, match="without a copy"):
        mx.from_dlpack(a, copy=False)


def test_imports_are_planned_as_one_copy_at_import():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    plan = interop.explain(a, "mlx")
    assert not plan.zero_copy and plan.copy_at == "import"
    assert "mlx's importer always copies cpu memory" in str(plan)
    assert [step.action for step in plan.steps] == ["export", "import"]  # no second copy
    with pytest.raises(interop.CopyForbiddenError, match="always copies"):
        interop.convert(a, "mlx", copy=False)
    fresh = interop.convert(a, "mlx", copy=True)
    assert ADAPTER.data_address(fresh) != _address(a)
    assert interop.explain(a, "mlx", copy=True).copy_at == "import"
    assert np.array_equal(np.array(fresh), a)


def test_mx_from_dlpack_still_releases_the_producer_during_the_call():
    capsule, token = counting_capsule(bytes(range(48)), "float32", (3, 4))
    y = mx.from_dlpack(capsule)
    assert COUNTER.released(token) == 1  # copied and released before anything else runs
    assert ADAPTER.to_bytes(y) == bytes(range(48))


def test_mx_from_dlpack_still_narrows_float64_and_complex128():
    assert mx.from_dlpack(np.arange(3.0)).dtype == mx.float32
    assert mx.from_dlpack(np.arange(3.0).astype(np.complex128)).dtype == mx.complex64


def test_float64_arrives_bit_for_bit_and_complex128_is_refused_with_the_reason():
    values = np.array([[np.pi, -1e300], [5e-324, 1 / 3]], dtype=np.float64)
    for view in (values, values.T, values[:, ::2]):
        y = interop.convert(view, "mlx")
        assert y.dtype == mx.float64
        assert ADAPTER.to_bytes(y) == np.ascontiguousarray(view).tobytes()
    with pytest.raises(interop.UnsupportedDTypeError, match="narrow it to complex64"):
        interop.convert(values.astype(np.complex128), "mlx")


def test_mx_from_dlpack_still_refuses_every_negative_stride():
    for view in (np.arange(12.0).reshape(3, 4)[::-1], np.arange(4.0).reshape(1, 4)[::-1]):
        with pytest.raises(ValueError, match="negative strides"):
            mx.from_dlpack(view)


@pytest.mark.parametrize(
    ("shape", "strides"),
    [((1, 4), (-4, 1)), ((3, 0), (-1, 1)), ((2, 1, 3), (3, -5, 1))],
    ids=["size-1", "empty", "size-1-inner"],
)
def test_negative_strides_mlx_refuses_but_the_layout_ignores_are_rebuilt(shape, strides):
    """The layout class ignores strides of size-1 dimensions and of empty tensors, so these
    reach MLX's importer: the adapter rebuilds the capsule, and releases the original once."""
    size = int(np.prod(shape))
    payload = np.arange(size, dtype=np.float32).tobytes()
    capsule, token = counting_capsule(payload, "float32", shape, strides=strides)
    y = interop.convert(capsule, "mlx")
    assert tuple(y.shape) == shape and ADAPTER.to_bytes(y) == payload
    del y, capsule
    gc.collect()
    assert COUNTER.released(token) == 1


def test_reversed_views_are_copied_at_the_source_then_imported():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[::-1]
    plan = interop.explain(a, "mlx")
    assert plan.copy_at == "source" and "negative" in str(plan)
    assert np.array_equal(np.array(interop.convert(a, "mlx")), a)


def test_mx_from_dlpack_still_honours_byte_offset():
    payload = np.arange(12, dtype=np.float32).tobytes()
    capsule, _ = counting_capsule(payload, "float32", (3, 4), byte_offset=16)
    assert ADAPTER.to_bytes(mx.from_dlpack(capsule)) == payload


# --- MLX as a producer: views shared, immutable by API -----------------------------------------
def test_mlx_still_exports_legacy_capsules_whatever_max_version_asks():
    x = mx.arange(6, dtype=mx.float32)
    info = read_capsule(x.__dlpack__(max_version=(1, 3)))
    assert info.version is None
    assert interop.inspect(x).read_only  # immutable by API: described read-only


def test_views_are_exported_as_views_with_a_byte_offset():
    x = mx.arange(24, dtype=mx.float32).reshape(4, 6)
    mx.eval(x)
    offset = _exported(x[1:])
    assert offset.byte_offset == 24 and offset.data == _exported(x).data
    assert _exported(x.T).strides == (1, 6) and _exported(x[::-1]).strides == (-6, 1)
    for name, view in ADAPTER.views(x).items():  # the kit's oracle agrees with MLX's export
        assert ADAPTER.data_address(view) == _exported(view).address, name
        y = interop.convert(view, "numpy")
        assert _address(y) == ADAPTER.data_address(view), name
        assert y.tobytes() == ADAPTER.to_bytes(view) and not y.flags.writeable


def test_lazy_arrays_are_evaluated_on_export():
    x = mx.arange(4, dtype=mx.float32) * 3 + 1  # nothing computed yet
    assert interop.convert(x, "numpy").tolist() == [1.0, 4.0, 7.0, 10.0]


def test_mlx_still_never_writes_an_array_in_place():
    x = mx.arange(4, dtype=mx.float32)
    alias = interop.convert(x, "numpy")
    before = ADAPTER.data_address(x)
    x[0] = 7
    assert ADAPTER.data_address(x) != before and alias[0] == 0  # a new array, not a write
    assert ADAPTER.mutate(x) is False


def test_writable_consumers_alias_mlx_memory_and_explain_says_so():
    torch = pytest.importorskip("torch")
    x = mx.arange(4, dtype=mx.float32)
    plan = interop.explain(x, "torch")
    assert plan.zero_copy
    assert any("writing through it also changes the mlx array" in n for n in plan.notes)
    t = interop.convert(x, "torch")
    assert isinstance(t, torch.Tensor) and t.data_ptr() == ADAPTER.data_address(x)
    t[0] = 42  # the documented hazard: MLX memory is not protected from other frameworks
    assert x[0].item() == 42


def test_buffers_aliased_by_an_export_are_not_reused_by_mlx():
    x = mx.arange(1000, dtype=mx.float32) * 2
    alias = interop.convert(x, "numpy")
    snapshot = alias.copy()
    x = x + 1  # the old array's last MLX reference goes; MLX must not donate its buffer
    mx.eval(x, mx.sin(mx.arange(1000, dtype=mx.float32)))
    assert np.array_equal(alias, snapshot)


# --- the adapter's own hooks -------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: mx.arange(3.0).reshape(3, 1).T, lambda: mx.arange(6.0)])
def test_copy_is_fresh_with_canonical_strides(make):
    """mx.array keeps the source's strides, including odd ones on size-1 dimensions, which
    MXNet refuses: the adapter's copy must be canonical."""
    x = make()
    y = ADAPTER.copy(x)
    info = _exported(y)
    assert info.layout == "canonical" and info.address != _exported(x).address
    assert ADAPTER.to_bytes(y) == ADAPTER.to_bytes(x)


@pytest.mark.parametrize("dtype", sorted(interop_mlx.DTYPES))
def test_exercise_runs_mlx_kernels(dtype):
    """`exercise` returns MLX's own x + x (logical not for bool) and sum, checked here
    against NumPy on the same bytes."""
    x = ADAPTER.sample(dtype, (2, 3))
    doubled, total = ADAPTER.exercise(x)
    assert doubled.shape == x.shape and doubled.dtype == x.dtype and total.shape == ()
    if dtype == "bfloat16":  # NumPy has none: compare through float32, where both are exact
        wide = np.array(x.astype(mx.float32).tolist())
        assert np.array(doubled.astype(mx.float32).tolist()).tolist() == (wide * 2).tolist()
        assert total.item() == pytest.approx(wide.sum(), rel=1e-2)
        return
    values = np.frombuffer(ADAPTER.to_bytes(x), dtype=dtype).reshape(2, 3)
    if dtype == "bool":
        assert ADAPTER.to_bytes(doubled) == np.logical_not(values).tobytes()
        assert total.item() == int(values.sum())
        return
    assert ADAPTER.to_bytes(doubled) == (values + values).tobytes()
    assert total.item() == pytest.approx(values.sum(dtype=np.complex128), rel=1e-3)


def test_importing_interop_or_listing_adapters_never_imports_mlx():
    code = (
        "import sys, numpy, interop\n"
        "interop.convert(numpy.ones(2), 'numpy')\n"
        "assert 'mlx' in {i.name for i in interop.adapters()}\n"
        "print('mlx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_mlx_copies_are_8_byte_aligned_still():
    """MLX's allocator gives 8-byte aligned arrays (its copies too): `copy_alignment=8`."""
    seen = set()
    for n in (1, 3, 16, 1000):
        y = ADAPTER.copy(mx.arange(n, dtype=mx.float32))
        address = ADAPTER.data_address(y)
        seen.add(address & -address)
    assert min(seen) < 64, seen
    assert interop_mlx.CAPS.copy_alignment <= min(seen)


def test_into_tensorflow_before_numpy_is_imported_copies_aligned_through_numpy():
    """A copy into TensorFlow, whose kernels abort on memory below 64 bytes of alignment, goes
    through NumPy's aligned copy even where the program has not imported NumPy (MLX's own copy
    is 8-byte aligned): TF's own kernels run on the result, in a child, so an abort fails here."""
    pytest.importorskip("tensorflow")
    code = (
        "import sys, interop\n"
        "from interop.registry import REGISTRY\n"
        "mlx = REGISTRY.get('mlx')\n"
        "x = mlx.sample('uint32', ())\n"
        "assert 'numpy' not in sys.modules and 'tensorflow' not in sys.modules\n"
        "print(interop.explain(x, 'tensorflow'))\n"
        "y = interop.convert(x, 'tensorflow')\n"
        "import tensorflow as tf\n"
        "print('sum', int(tf.reduce_sum(y + y)), int(x.item()) * 2)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "with NumPy over its memory" in done.stdout, done.stdout
    _, got, want = done.stdout.strip().splitlines()[-1].split()
    assert got == want
