"""The TensorFlow adapter against real tensors and variables: dtypes, layouts, immutability."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import interop
from interop.testing import COUNTER, counting_capsule

np = pytest.importorskip("numpy")
tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
interop_tensorflow = pytest.importorskip("interop_tensorflow")

ADAPTER = interop_tensorflow.TensorflowAdapter()


def tf_address(t: object) -> int:
    return ADAPTER.data_address(t)


# --- dtypes TensorFlow cannot export: refused before TensorFlow sees them ------------------------
def test_string_tensor_is_refused_and_the_process_survives() -> None:
    # Exporting a string tensor aborts the process inside TensorFlow: run it apart.
    code = textwrap.dedent(
        """
        import interop, tensorflow as tf
        from interop.testing import explain_or_raise
        t = tf.constant(["a", "bc"])
        for call in (interop.convert, explain_or_raise):
            try:
                call(t, "numpy")
            except interop.UnsupportedDTypeError as exc:
                assert "string" in str(exc) and "tensorflow" in str(exc), exc
            else:
                raise SystemExit("not refused")
        try:
            interop.inspect(t)
        except interop.UnsupportedDTypeError:
            pass
        print(interop.convert(tf.constant([1, 2]), "numpy").tolist())
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("[1, 2]")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "int4"])
def test_tensorflow_float8_and_int4_tensors_are_refused(dtype: str) -> None:
    source = tf.constant([1, 2], tf.int8 if dtype == "int4" else tf.float32)
    t = tf.cast(source, getattr(tf.dtypes.experimental, dtype))
    with pytest.raises(interop.UnsupportedDTypeError, match=f"tensorflow.*{dtype}"):
        interop.convert(t, "torch")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_into_tensorflow_is_refused(dtype: str) -> None:
    t = torch.tensor([1.0, -2.0]).to(getattr(torch, dtype))
    with pytest.raises(interop.UnsupportedDTypeError, match=dtype) as err:
        interop.convert(t, "tf")
    assert "tensorflow" in str(err.value)


# --- dtypes TensorFlow imports -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "complex64", "complex128", "bool", "uint64"])
def test_torch_dtypes_reach_tensorflow_shared_and_bit_exact(dtype: str) -> None:
    source = torch.tensor([[1.5, -2.0, 0.0], [3.0, 1.0, -0.5]])
    t = source.to(getattr(torch, dtype)) if dtype != "uint64" else source.abs().to(torch.uint64)
    y = interop.convert(t, "tensorflow", copy=False)
    assert y.dtype.name == dtype and tf_address(y) == t.data_ptr()
    raw = t.view(torch.uint8) if dtype != "bool" else t.to(torch.uint8)
    assert ADAPTER.to_bytes(y) == raw.numpy().tobytes()


# --- immutable TF buffers ------------------------------------------------------------------------
def test_numpy_receives_tensorflow_tensors_read_only_and_shared() -> None:
    t = tf.reshape(tf.range(12, dtype=tf.float32), (3, 4))
    plan = interop.explain(t, "numpy")
    assert plan.zero_copy and "aliases an immutable tensorflow buffer" in str(plan)
    y = interop.convert(t, "numpy")
    assert not y.flags.writeable and y.ctypes.data == tf_address(t)
    with pytest.raises(ValueError):
        y[0, 0] = 1


def test_explain_says_torch_results_alias_the_immutable_tensorflow_buffer() -> None:
    t = tf.zeros((2, 2))
    plan = interop.explain(t, "torch")
    assert plan.zero_copy and "aliases an immutable tensorflow buffer" in str(plan)
    assert interop.convert(t, "torch").data_ptr() == tf_address(t)


# --- tf.Variable as a source ---------------------------------------------------------------------
def test_variable_is_a_source_shared_through_its_current_value() -> None:
    v = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert not hasattr(v, "__dlpack__")
    plan = interop.explain(v, "torch")
    assert plan.zero_copy and plan.source == "tensorflow"
    y = interop.convert(v, "torch", copy=False)
    assert y.data_ptr() == tf_address(v)
    assert y.tolist() == v.numpy().tolist()
    y[0, 0] = 100  # the note's warning: the write reaches the variable's buffer
    assert float(v.numpy()[0, 0]) == 100.0
    back = interop.convert(v, "numpy")
    assert back.tolist() == v.numpy().tolist() and not back.flags.writeable


def test_variable_and_tensor_copies_are_fresh() -> None:
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    t = tf.constant([[1, 2], [3, 4]], dtype=tf.int64)
    for x in (v, t):
        for target in ("tensorflow", "torch", "numpy", "jax"):
            if target == "jax" and x.dtype == tf.int64:
                continue  # depends on jax_enable_x64, tested in test_jax.py
            y = interop.convert(x, target, copy=True)
            assert interop.inspect(y).address != tf_address(x), target
            assert np.array_equal(np.asarray(y), x.numpy()), target


def test_symbolic_tensors_are_refused_inside_tf_function() -> None:
    @tf.function(autograph=False)
    def f(x):
        interop.convert(x, "numpy")
        return x

    with pytest.raises(interop.UnsupportedTensorError, match="symbolic"):
        f(tf.ones(3))


def test_our_errors_keep_their_type_through_autograph() -> None:
    """A `tf.function` converts its Python (AutoGraph, the default) and re-raises what that
    code raises as its own StagingError unless it can rebuild the type: ours pass through."""

    @tf.function
    def f(x):
        if tf.reduce_sum(x) > 0:  # (a branch AutoGraph converts)
            interop.convert(x, "numpy")
        return x

    with pytest.raises(interop.UnsupportedTensorError, match="symbolic") as refused:
        f(tf.ones(3))
    assert type(refused.value).__module__ == "interop.errors"


# --- layouts: C order only, no byte_offset -------------------------------------------------------
@pytest.mark.parametrize(
    "view, layout",
    [
        (lambda a: a.T, "permuted"),
        (lambda a: a[:, ::2], "strided"),
        (lambda a: a[::-1], "negative"),
        (lambda a: np.broadcast_to(a[0], (4, 6)), "broadcast"),
    ],
    ids=["transposed", "step-sliced", "negative", "broadcast"],
)
def test_layouts_tensorflow_cannot_import_are_copied_and_explained(view, layout: str) -> None:
    x = view(np.arange(24, dtype=np.float32).reshape(4, 6))
    plan = interop.explain(x, "tf")
    assert not plan.zero_copy and layout in str(plan)
    with pytest.raises(interop.CopyForbiddenError, match=layout):
        interop.convert(x, "tf", copy=False)
    y = interop.convert(x, "tf")
    assert np.array_equal(y.numpy(), x)


def aligned(count: int) -> np.ndarray:
    """A float32 array whose data is 64-byte aligned (NumPy's allocator gives 16)."""
    block = np.zeros(count + 16, dtype=np.float32)
    start = (-block.ctypes.data % 64) // 4
    return block[start : start + count]


def test_odd_strides_on_size_one_dims_are_shared() -> None:
    base = aligned(40)
    base[:] = np.arange(40)
    x = np.lib.stride_tricks.as_strided(base, (3, 1), (4, 28))
    plan = interop.explain(x, "tf", copy=False)
    assert plan.zero_copy and plan.layout == "contiguous"
    y = interop.convert(x, "tf", copy=False)
    assert tf_address(y) == x.ctypes.data and np.array_equal(y.numpy(), x)


def test_byte_offset_is_folded_by_a_copy() -> None:
    payload = bytes(range(48))
    capsule, where = counting_capsule(payload, "float32", (3, 4), byte_offset=64)
    assert "byte_offset" in str(interop.explain(capsule, "tf"))
    capsule, where = counting_capsule(payload, "float32", (3, 4), byte_offset=64)
    y = interop.convert(capsule, "tf")
    assert ADAPTER.to_bytes(y) == payload
    del y, capsule
    gc.collect()
    assert COUNTER.released(where) == 1


UNALIGNED_USE = """
import numpy as np, tensorflow as tf, interop
base = np.arange(40, dtype=np.float32)
x = base[1:13].reshape(3, 4)
assert x.ctypes.data % 64
y = interop.convert(x, "tf")
print(float(tf.reduce_sum(y * 2.0 + 1.0)), float(np.sum(x * 2.0 + 1.0)))
"""


def test_unaligned_buffers_reach_tensorflow_as_aligned_copies() -> None:
    # TF's kernels abort the process on buffers not 64-byte aligned (Check failed:
    # IsAligned()), although from_dlpack takes them: the plan copies them, aligned.
    x = np.arange(40, dtype=np.float32)[1:13].reshape(3, 4)
    assert x.ctypes.data % 64
    plan = interop.explain(x, "tf")
    assert not plan.zero_copy and plan.copy_at == "source" and "64-byte aligned" in str(plan)
    y = interop.convert(x, "tf")
    assert tf_address(y) % 64 == 0 and tf_address(y) != x.ctypes.data
    assert np.array_equal(y.numpy(), x)
    with pytest.raises(interop.CopyForbiddenError, match="64-byte aligned"):
        interop.convert(x, "tf", copy=False)
    # used by TF's own kernels, in a process of its own: an abort fails this case only
    out = subprocess.run(
        [sys.executable, "-c", UNALIGNED_USE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got, expected = out.stdout.split()
    assert float(got) == float(expected) == 2 * sum(range(1, 13)) + 12


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), ()])
def test_zero_size_and_scalar_tensors_round_trip(shape: tuple[int, ...]) -> None:
    t = tf.zeros(shape, dtype=tf.bfloat16) + 1
    for target in ("numpy", "torch", "jax"):
        y = interop.convert(t, target)
        assert tuple(y.shape) == shape
        back = interop.convert(y, "tf")
        assert back.shape == t.shape and ADAPTER.to_bytes(back) == ADAPTER.to_bytes(t)


# --- the fast path's importer --------------------------------------------------------------------
def test_the_fast_importer_is_tensorflows_own_c_import_and_shares():
    importer = interop_tensorflow.TensorflowAdapter().importer(False, "float32")
    assert importer is not tf.experimental.dlpack.from_dlpack  # the cheaper call is in use
    t = torch.arange(16, dtype=torch.float32)  # torch's buffers are 64-byte aligned
    y = importer(torch.utils.dlpack.to_dlpack(t))
    assert isinstance(y, type(tf.constant(0.0))) and y.dtype == tf.float32
    assert interop_tensorflow.TensorflowAdapter().data_address(y) == t.data_ptr()
    assert float(tf.reduce_sum(y * 2)) == 240.0 and y.device.endswith("CPU:0")


def test_the_fast_importer_leaves_an_uninitialised_context_to_tensorflow(monkeypatch):
    from tensorflow.python.eager import context

    calls = []
    monkeypatch.setattr(tf.experimental.dlpack, "from_dlpack", lambda c: calls.append(c) or "tf")
    interop_tensorflow._fast_import.cache_clear()
    try:
        importer = interop_tensorflow._fast_import()
        monkeypatch.setattr(context, "_context", None)  # as before TensorFlow's first use
        capsule = torch.utils.dlpack.to_dlpack(torch.ones(4))
        assert importer(capsule) == "tf" and calls == [capsule]
    finally:
        monkeypatch.undo()
        interop_tensorflow._fast_import.cache_clear()


def test_the_fast_exporter_gives_what_to_dlpack_gives():
    export = interop_tensorflow.TensorflowAdapter().exporter(False, False, "float32")
    assert export is not tf.experimental.dlpack.to_dlpack  # the cheaper call is in use
    t = tf.reshape(tf.range(12, dtype=tf.float32), (3, 4))
    fast, public = interop.inspect(export(t)), interop.inspect(tf.experimental.dlpack.to_dlpack(t))
    assert fast == public and fast.data == ADAPTER.data_address(t)
    assert torch.from_dlpack(export(t)).sum().item() == 66.0  # used by torch's kernels
