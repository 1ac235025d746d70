"""The JAX adapter against real JAX arrays: x64, alignment, layouts, immutability, copies."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import interop
from interop.plan import CopyAtSource, Import
from interop.testing import COUNTER, counting_capsule, explain_or_raise

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
interop_jax = pytest.importorskip("interop_jax")


def numpy_at(shape: tuple[int, ...], dtype: str = "float32", misalign: int = 0) -> np.ndarray:
    """A NumPy array whose data sits `misalign` bytes past a 64-byte boundary."""
    count = int(np.prod(shape))
    width = np.dtype(dtype).itemsize
    raw = np.zeros(count * width + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + misalign
    out = raw[start : start + count * width].view(dtype).reshape(shape)
    out[...] = np.arange(count).reshape(shape)
    assert out.ctypes.data % 64 == misalign
    return out


def address(x: object) -> int:
    return interop.inspect(x).address


# --- jax_enable_x64 ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "uint64", "float64", "complex128"])
def test_x64_off_refuses_64_bit_input_naming_the_switch(dtype: str) -> None:
    x = np.arange(6, dtype=dtype)
    with jax.enable_x64(False):
        for call in (explain_or_raise, interop.convert):
            with pytest.raises(interop.UnsupportedDTypeError) as err:
                call(x, "jax")
            assert "jax_enable_x64" in str(err.value) and dtype in str(err.value)


def test_x64_on_keeps_64_bit_values_and_a_cached_plan_does_not_leak_across_modes() -> None:
    x = np.array([2**40 + 1, -(2**50)], dtype=np.int64)
    with jax.enable_x64(True):
        assert interop_jax.JaxAdapter().capabilities() is interop_jax.CAPS_X64
        y = interop.convert(x, "jax")
        assert y.dtype == jnp.int64 and np.asarray(y).tolist() == x.tolist()
    with jax.enable_x64(False):  # the same key but the other mode: refused, not narrowed
        assert interop_jax.JaxAdapter().capabilities() is interop_jax.CAPS_X32
        with pytest.raises(interop.UnsupportedDTypeError, match="jax_enable_x64"):
            interop.convert(x, "jax")


def test_capabilities_do_not_import_jax_and_follow_the_environment() -> None:
    code = textwrap.dedent(
        """
        import sys, interop_jax
        caps = interop_jax.JaxAdapter().capabilities()
        assert "jax" not in sys.modules, "capabilities() imported jax"
        print(caps is interop_jax.CAPS_X64)
        """
    )
    for flag, expected in (("1", "True"), ("0", "False")):
        env = {**os.environ, "JAX_ENABLE_X64": flag}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


# --- alignment: JAX shares 64-byte aligned host buffers; the core copies the others -------------
def test_aligned_numpy_is_shared_with_jax() -> None:
    x = numpy_at((3, 4))
    plan = interop.explain(x, "jax", copy=False)
    assert plan.zero_copy
    y = interop.convert(x, "jax", copy=False)
    assert y.unsafe_buffer_pointer() == x.ctypes.data
    assert np.array_equal(np.asarray(y), x)


def test_unaligned_numpy_into_jax_is_an_explained_copy_and_copy_false_raises() -> None:
    x = numpy_at((2500, 4000), misalign=16)  # 40 MB: the copy takes milliseconds
    plan = interop.explain(x, "jax")
    # JAX's importer would copy it itself, 4-5x slower than NumPy's aligned copy JAX then shares
    assert not plan.zero_copy and plan.copy_at == "source"
    assert [s.numpy for s in plan.steps if isinstance(s, CopyAtSource)] == [True]
    assert not any(isinstance(s, Import) and s.copies for s in plan.steps)
    assert "64-byte aligned" in str(plan)
    with pytest.raises(interop.CopyForbiddenError, match="64-byte") as err:
        interop.convert(x, "jax", copy=False)
    assert isinstance(err.value, BufferError)
    y = interop.convert(x, "jax")
    assert y.unsafe_buffer_pointer() != x.ctypes.data
    assert y.unsafe_buffer_pointer() % 64 == 0  # the aligned copy, shared
    expected = x.copy()
    x[...] = -1  # JAX's copy is asynchronous: the adapter must have waited for it
    assert np.array_equal(np.asarray(y), expected)


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0)])
def test_an_unaligned_empty_array_reaches_jax_under_copy_false(shape) -> None:
    # no bytes to copy or share, so no copy to forbid (jnp.from_dlpack raises ValueError)
    raw = np.zeros(128, np.uint8)
    x = np.ndarray(shape, np.float32, raw, offset=(-raw.ctypes.data) % 64 + 4)
    assert x.ctypes.data % 64 == 4
    plan = interop.explain(x, "jax", copy=False)
    assert "aligned" not in str(plan), plan
    y = interop.convert(x, "jax", copy=False)
    assert isinstance(y, jax.Array) and y.shape == shape and y.dtype == jnp.float32
    assert jnp.concatenate([y, jnp.zeros_like(y)]).size == 0  # JAX's own kernels take it


# --- copy=True really copies (JAX's own copy=True aliases on CPU) --------------------------------
def test_copy_true_gives_fresh_memory_in_every_direction() -> None:
    x = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    for target in ("numpy", "torch", "jax"):
        y = interop.convert(x, target, copy=True)
        assert address(y) != x.unsafe_buffer_pointer(), target
        assert np.array_equal(np.asarray(y), np.asarray(x))
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    y = interop.convert(t, "jax", copy=True)
    assert y.unsafe_buffer_pointer() != t.data_ptr()
    t[0, 0] = 99
    assert float(y[0, 0]) == 0.0
    fresh = interop_jax.JaxAdapter().copy(x)
    assert fresh.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()


# --- immutable JAX buffers shared with writable and read-only consumers --------------------------
def test_numpy_receives_jax_arrays_read_only_and_shared() -> None:
    x = jnp.arange(12, dtype=jnp.int32).reshape(3, 4)
    plan = interop.explain(x, "numpy")
    assert plan.zero_copy and "aliases an immutable jax buffer and is read-only" in str(plan)
    y = interop.convert(x, "numpy")
    assert not y.flags.writeable
    assert y.ctypes.data == x.unsafe_buffer_pointer()
    with pytest.raises(ValueError):
        y[0, 0] = 5


def test_explain_says_a_writable_result_aliases_the_immutable_jax_buffer() -> None:
    x = jnp.zeros((2, 3), dtype=jnp.float32)
    plan = interop.explain(x, "torch")
    assert plan.zero_copy
    assert "aliases an immutable jax buffer" in str(plan)
    y = interop.convert(x, "torch")
    y[0, 0] = 7  # what the note warns about, and why it is said
    assert float(x[0, 0]) == 7.0


def test_read_only_numpy_reaches_jax_zero_copy() -> None:
    # jax.dlpack.from_dlpack raises BufferError here (it asks NumPy for a legacy capsule).
    x = numpy_at((4, 4))
    x.flags.writeable = False
    plan = interop.explain(x, "jax", copy=False)
    assert plan.zero_copy
    y = interop.convert(x, "jax", copy=False)
    assert y.unsafe_buffer_pointer() == x.ctypes.data


# --- layouts -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "view, layout",
    [(lambda a: a[:, ::2], "strided"), (lambda a: a[::-1], "negative")],
    ids=["step-sliced", "negative"],
)
def test_layouts_jax_cannot_import_are_copied_and_explained(view, layout: str) -> None:
    x = view(numpy_at((4, 6)))
    plan = interop.explain(x, "jax")
    assert not plan.zero_copy and plan.copy_at == "source" and layout in str(plan)
    with pytest.raises(interop.CopyForbiddenError, match=layout):
        interop.convert(x, "jax", copy=False)
    y = interop.convert(x, "jax")
    assert np.array_equal(np.asarray(y), x)


def test_broadcast_numpy_is_copied_into_jax() -> None:
    x = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))
    assert not interop.explain(x, "jax").zero_copy
    assert np.array_equal(np.asarray(interop.convert(x, "jax")), x)


def test_transposes_are_shared_and_index_correctly() -> None:
    if not interop_jax.shares_permuted(interop_jax.installed_version()):
        pytest.skip("JAX before 0.5.1 gets transposes copied (the tests below)")
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).T  # jax#7657: wrong indexing
    y = interop.convert(t, "jax", copy=False)
    assert y.unsafe_buffer_pointer() == t.data_ptr()
    assert np.array_equal(np.asarray(y), t.numpy())
    assert float(y[5, 3]) == float(t[5, 3]) and float((y @ jnp.ones(4))[2]) == float(t[2].sum())


def use_in_jax(y: jax.Array, x: np.ndarray) -> None:
    """JAX's own kernels on `y`, which must hold `x`: the calls that fail in JAX before 0.5.1
    on a zero-copy import of a transposed buffer ("Unexpected XLA layout override")."""
    assert np.array_equal(np.asarray(y + y), x + x)
    assert float(jnp.sum(y)) == float(x.sum())
    assert np.array_equal(np.asarray(jax.jit(lambda v: v[..., :1] * 3)(y)), x[..., :1] * 3)


def test_the_permuted_layout_boundary_is_jax_0_5_1() -> None:
    shares = interop_jax.shares_permuted
    assert not any(shares(v) for v in ("0.4.35", "0.4.36", "0.5.0"))
    assert all(shares(v) for v in ("0.5.1", "0.5.2", "0.5.3", "0.6.0", "0.10.2", "1.0"))
    assert shares("0.5.1.dev20250301") and shares(None)  # unknown: as current releases
    for caps in (interop_jax.CAPS_X64, interop_jax.CAPS_X32):
        assert "permuted" in caps.import_layouts
    for caps in (interop_jax.CAPS_X64_COMPACT, interop_jax.CAPS_X32_COMPACT):
        assert "permuted" not in caps.import_layouts
        assert {"canonical", "contiguous"} <= caps.import_layouts
        assert any("0.5.1" in note and "transposed" in note for note in caps.notes)


def test_the_installed_jax_gets_transposes_shared_only_where_its_kernels_take_them() -> None:
    """The boundary checked on the JAX installed (0.4.35 in `tox -e jax-min`): JAX's own import
    of an aligned transposed buffer either works or fails as the version says, and the adapter
    shares such buffers exactly where it works."""
    version = interop_jax.installed_version()
    shares = interop_jax.shares_permuted(version)
    caps = interop_jax.JaxAdapter().capabilities()
    assert ("permuted" in caps.import_layouts) == shares, version
    x = numpy_at((3, 4)).T
    direct = jax.dlpack.from_dlpack(x)
    assert direct.unsafe_buffer_pointer() == x.ctypes.data  # aligned: JAX shares it
    if shares:
        use_in_jax(direct, x)
    else:
        with pytest.raises(AssertionError, match="Unexpected XLA layout override"):
            use_in_jax(direct, x)
    plan = interop.explain(x, "jax")
    assert plan.zero_copy == shares, str(plan)
    y = interop.convert(x, "jax")
    assert (y.unsafe_buffer_pointer() == x.ctypes.data) == shares
    use_in_jax(y, x)


def test_jax_before_0_5_1_gets_transposes_copied_compact_with_the_reason_explained(
    monkeypatch,
) -> None:
    monkeypatch.setattr(interop_jax, "installed_version", lambda: "0.4.35")
    interop_jax._caps_pair.cache_clear()
    interop.api.HUB.routes.clear()  # routes learned from shared transposes are not asked
    try:
        x64 = interop_jax.x64_enabled()
        expected = interop_jax.CAPS_X64_COMPACT if x64 else interop_jax.CAPS_X32_COMPACT
        assert interop_jax.JaxAdapter().capabilities() is expected
        x = numpy_at((2, 3, 4)).transpose(0, 2, 1)
        plan = interop.explain(x, "jax")
        assert not plan.zero_copy and plan.copy_at == "source"
        assert "canonical/contiguous layouts and this tensor is permuted" in str(plan)
        with pytest.raises(interop.CopyForbiddenError, match="permuted"):
            interop.convert(x, "jax", copy=False)
        y = interop.convert(x, "jax")
        assert y.unsafe_buffer_pointer() != x.ctypes.data
        use_in_jax(y, x)
        compact = numpy_at((4, 3))  # other layouts are still shared
        assert interop.convert(compact, "jax").unsafe_buffer_pointer() == compact.ctypes.data
    finally:
        monkeypatch.undo()
        interop_jax._caps_pair.cache_clear()
        interop.api.HUB.routes.clear()
    current = interop_jax.shares_permuted(interop_jax.installed_version())
    x64, x32 = interop_jax._caps_pair()
    assert (x64, x32) == (
        (interop_jax.CAPS_X64, interop_jax.CAPS_X32)
        if current
        else (interop_jax.CAPS_X64_COMPACT, interop_jax.CAPS_X32_COMPACT)
    )


# --- dtypes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "bool"])
def test_torch_and_jax_carry_float8_bfloat16_and_bool_both_ways(dtype: str) -> None:
    t = torch.tensor([[-3.5, 0.0, 1.5], [2.0, -0.5, 1.0]]).to(getattr(torch, dtype))
    y = interop.convert(t, "jax", copy=False)
    assert y.dtype.name == dtype and y.unsafe_buffer_pointer() == t.data_ptr()
    assert np.asarray(y).tobytes() == t.view(torch.uint8).numpy().tobytes()
    back = interop.convert(y, "torch", copy=False)
    assert back.dtype == t.dtype and back.data_ptr() == t.data_ptr()


def test_int4_jax_array_is_refused_with_a_library_error() -> None:
    x = jnp.zeros(4, dtype=jnp.int4)
    with pytest.raises(interop.UnsupportedDTypeError, match="int4"):
        interop.convert(x, "numpy")


# --- what is not a buffer ------------------------------------------------------------------------
def test_traced_values_are_refused_inside_jit() -> None:
    @jax.jit
    def f(x):
        interop.convert(x, "numpy")
        return x

    with pytest.raises(interop.UnsupportedTensorError, match="traced"):
        f(jnp.ones(3))


def test_deleted_arrays_are_refused_and_sharded_ones_are_not_one_tensor() -> None:
    x = jnp.ones(3)
    x.delete()
    with pytest.raises(interop.UnsupportedTensorError, match="deleted"):
        interop.convert(x, "numpy")
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, interop
        mesh = jax.sharding.Mesh(jax.devices()[:2], ("i",))
        spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i"))
        x = jax.device_put(jnp.arange(8.0), spec)
        try:
            interop.inspect(x)  # one DLPack tensor cannot describe it
        except interop.UnsupportedTensorError as exc:
            print(exc)
        print(type(interop.convert(x, "numpy")).__name__)  # its shards, never a gather
        """
    )
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sharded over 2 devices" in out.stdout and "LocalShards" in out.stdout


def test_a_legacy_capsule_reaches_jax_and_is_released_once() -> None:
    payload = bytes(range(48))
    capsule, where = counting_capsule(payload, "float32", (3, 4), versioned=False)
    y = interop.convert(capsule, "jax")
    assert np.asarray(y).tobytes() == payload
    del y, capsule
    gc.collect()
    assert COUNTER.released(where) == 1


# --- the fast path's importer --------------------------------------------------------------------
def test_the_fast_path_imports_cpu_buffers_through_xla_sharing_them():
    # this jaxlib's XLA import is the known one: the importer must use it, not the public call
    assert interop_jax._xla_cpu_import() is not None
    importer = interop_jax.JaxAdapter().importer(True, "float32")
    assert importer is not jax.dlpack.from_dlpack
    from interop.capsule import Held

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    y = importer(Held(torch.utils.dlpack.to_dlpack(t)))
    assert isinstance(y, jax.Array) and y.unsafe_buffer_pointer() == t.data_ptr()
    assert y.sharding == jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    assert y.committed and y.dtype == jnp.float32 and y.shape == (3, 4)
    assert float(jnp.sum(y * 2)) == 132.0 and float(jax.jit(jnp.max)(y)) == 11.0
    for _ in range(3):  # the route learned from it gives the same
        z = interop.convert(t, "jax")
    assert z.unsafe_buffer_pointer() == t.data_ptr() and float(jnp.sum(z)) == 66.0


def test_the_fast_importer_leaves_other_devices_and_other_jaxlibs_to_the_public_call(
    monkeypatch,
):
    from interop.capsule import Held

    calls = []
    monkeypatch.setattr(jax.dlpack, "from_dlpack", lambda s: calls.append(s) or "public")
    interop_jax._fast_import.cache_clear()
    try:
        importer = interop_jax.JaxAdapter().importer(True, "float32")
        a = numpy_at((4,))
        pinned = Held(a.__dlpack__(), device=(3, 0))  # kDLCUDAHost: not the CPU's own memory
        assert importer(pinned) == "public" and calls == [pinned]
        # a jaxlib whose XLA import is not the known one: the public call, always
        monkeypatch.setattr(interop_jax, "_XLA_IMPORT_VERSIONS", range(0))
        interop_jax._xla_cpu_import.cache_clear()
        interop_jax._fast_import.cache_clear()
        assert interop_jax._xla_cpu_import() is None
        assert interop_jax.JaxAdapter().importer(True, "float32") is jax.dlpack.from_dlpack
    finally:
        monkeypatch.undo()
        interop_jax._xla_cpu_import.cache_clear()
        interop_jax._fast_import.cache_clear()
    assert interop_jax._xla_cpu_import() is not None


def test_the_fast_path_exports_through_xla_the_arrays_own_buffer():
    export = interop_jax.JaxAdapter().exporter(False, True, "float32")
    assert export is not interop_jax._export  # this jaxlib's XLA export is the known one
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    t = torch.from_dlpack(export(x))
    assert t.data_ptr() == x.unsafe_buffer_pointer() and t.shape == (3, 4)
    assert (t * 2).sum().item() == 132.0
    gone = jnp.ones(3)
    gone.delete()
    with pytest.raises(Exception, match="deleted"):  # the route then takes the full path
        export(gone)
    with pytest.raises(interop.UnsupportedTensorError, match="deleted"):
        interop.convert(gone, "torch")


def test_the_fast_export_falls_back_to_dlpack_where_xla_differs(monkeypatch):
    from jax._src.lib import _jax

    monkeypatch.setattr(_jax, "buffer_to_dlpack_managed_tensor", lambda b, stream: None)
    interop_jax._fast_export.cache_clear()
    try:
        assert interop_jax._fast_export() is interop_jax._export  # its probe found no capsule
    finally:
        monkeypatch.undo()
        interop_jax._fast_export.cache_clear()
    assert interop_jax._fast_export() is not interop_jax._export
