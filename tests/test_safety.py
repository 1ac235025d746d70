"""Hazards measured in the frameworks, each as the behaviour promised instead: unaligned
buffers into TensorFlow, copy= validation, read-only memory across hops, TensorFlow's cached
constants, torch's lazy views, typed errors, one bad plugin among good ones, streams, and what
the conformance kit and the fuzzers found in the frameworks (section "found by the harness").

Unaligned buffers are also what the conformance kit checks for every pair
(interop/testing/suite.py); NULL deleters live with the other hostile inputs in
tests/test_hostile.py. Cases that may abort the process, or that corrupt a framework
process-wide, run in a worker process (`interop.testing.isolation.Worker`), so that they fail
one test, by name, not the run.
"""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

import interop
from interop.dlpack import DEVICE_CODES
from interop.registry import REGISTRY
from interop.testing import COUNTER, counting_capsule, explain_or_raise
from interop.testing.isolation import Worker

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parent.parent
WRITABLE_CONSUMERS = ("torch", "mxnet", "paddle")


def installed(*names: str) -> list[str]:
    """The named frameworks whose adapters can convert here."""
    found = []
    for name in names:
        try:
            adapter = REGISTRY.get(name)
        except interop.InteropError:
            continue
        if adapter.unavailable() is None:
            found.append(name)
    return found


def require(*names: str) -> None:
    """Skip unless these frameworks convert here (checked when the test runs: importing this
    module, as worker processes do, loads no adapter)."""
    missing = [n for n in names if not installed(n)]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)}")


def aligned(count: int, dtype: str = "float32", misalign: int = 0) -> Any:
    """A NumPy array of 5, 6, 7, ... whose data sits `misalign` bytes past a 64-byte boundary
    (fresh NumPy arrays are only 16-byte aligned)."""
    width = np.dtype(dtype).itemsize
    raw = np.zeros(count * width + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + misalign
    out = raw[start : start + count * width].view(dtype)
    out[...] = np.arange(5, 5 + count)
    assert out.ctypes.data % 64 == misalign
    return out


@pytest.fixture(scope="module")
def worker():
    with Worker(timeout=240) as shared:
        yield shared


# --- 1. TensorFlow needs 64-byte aligned buffers ------------------------------------------------
def _unaligned_3x4(source: str) -> Any:
    """A (3, 4) float32 tensor of `source` whose data is not 64-byte aligned, as ordinary code
    makes them: a fresh 16-byte aligned NumPy array, or a slice `x[1:]`."""
    if source == "numpy-fresh":
        return aligned(12, misalign=16).reshape(3, 4)
    if source == "numpy-slice":
        return aligned(13)[1:].reshape(3, 4)
    if source == "torch":
        import torch

        return torch.arange(5.0, 21.0).reshape(4, 4)[1:]
    if source == "mxnet":
        from interop_mxnet import import_mxnet

        mx = import_mxnet()
        return mx.nd.array(np.arange(5.0, 21.0).reshape(4, 4), dtype="float32")[1:]
    if source == "paddle":
        from interop_paddle import import_paddle

        paddle = import_paddle()
        return paddle.arange(5.0, 21.0, dtype="float32").reshape([4, 4])[1:]
    raise AssertionError(source)


def tensorflow_kernels_on_unaligned(source: str) -> None:
    """The abort: an unaligned buffer into TensorFlow, then its kernels."""
    import tensorflow as tf

    src = REGISTRY.get(source.partition("-")[0])
    x = _unaligned_3x4(source)
    assert interop.inspect(x).address % 64, "the source is 64-byte aligned: nothing to test"
    want = np.frombuffer(src.to_bytes(x), np.float32).reshape(3, 4).astype(np.float64)
    y = interop.convert(x, "tensorflow")
    assert REGISTRY.get("tensorflow").data_address(y) % 64 == 0, "TensorFlow got it unaligned"
    got = {
        "reduce_sum": tf.reduce_sum(y).numpy(),
        "add": (y + y).numpy(),
        "multiply": (y * 3).numpy(),
        "matmul": tf.matmul(y, y, transpose_b=True).numpy(),
        "cast": tf.cast(y, tf.float64).numpy(),
        "exp": tf.exp(y / 16).numpy(),
    }
    expected = {
        "reduce_sum": want.sum(),
        "add": want + want,
        "multiply": want * 3,
        "matmul": want @ want.T,
        "cast": want,
        "exp": np.exp(want / 16),
    }
    for name, value in got.items():
        assert np.allclose(value, expected[name], rtol=1e-6), f"tf {name} is wrong"


@pytest.mark.parametrize("source", ["numpy-fresh", "numpy-slice", "torch", "mxnet", "paddle"])
def test_tensorflow_kernels_run_on_results_of_unaligned_sources(worker, source):
    require("tensorflow", source.partition("-")[0])
    worker.call(tensorflow_kernels_on_unaligned, source).unwrap()


def test_tensorflow_alignment_copy_is_explained_and_refused_under_copy_false():
    require("tensorflow")
    x = aligned(12, misalign=16).reshape(3, 4)
    plan = interop.explain(x, "tensorflow")
    assert not plan.zero_copy, "an unaligned buffer would reach TensorFlow's kernels"
    assert "align" in str(plan).lower(), f"explain does not say why it copies:\n{plan}"
    with pytest.raises(interop.CopyForbiddenError, match="(?i)align") as err:
        interop.convert(x, "tensorflow", copy=False)
    assert isinstance(err.value, BufferError)


def test_aligned_buffers_still_reach_tensorflow_zero_copy():
    require("tensorflow")
    import tensorflow as tf

    x = aligned(12).reshape(3, 4)
    assert interop.explain(x, "tensorflow").zero_copy
    y = interop.convert(x, "tensorflow", copy=False)
    assert REGISTRY.get("tensorflow").data_address(y) == x.ctypes.data
    assert float(tf.reduce_sum(y)) == float(x.sum())


# --- 3. copy= is validated and never poisons the plan cache -------------------------------------
def test_copy_accepts_numpy_booleans_as_their_value():
    require("torch")
    a = aligned(8)
    fresh = interop.convert(a, "torch", copy=np.True_)
    assert fresh.data_ptr() != a.ctypes.data, "copy=np.True_ returned memory aliasing a"
    shared = interop.convert(a, "torch", copy=np.False_)
    assert shared.data_ptr() == a.ctypes.data
    with pytest.raises(interop.CopyForbiddenError):
        interop.convert(a[::-1], "torch", copy=np.False_)
    assert not interop.explain(a, "torch", copy=np.True_).zero_copy


@pytest.mark.parametrize(
    "bad", [1, 0, 1.0, "yes", "", [], object()], ids=lambda v: type(v).__name__ + repr(v)[:8]
)
def test_copy_rejects_anything_but_none_and_booleans(bad):
    require("torch")
    a = aligned(8)
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.InteropError) as err:
            call(a, "torch", copy=bad)
        assert isinstance(err.value, TypeError), f"{type(err.value).__name__} is no TypeError"
        assert "copy" in str(err.value), f"the error does not name `copy`: {err.value}"


def copy_true_after_copy_one() -> dict[str, bool]:
    """In a fresh process: `copy=1` first (it once poisoned the plan cache), then copy=True."""
    a = aligned(8, "float64")
    try:
        interop.convert(a, "torch", copy=1)
    except TypeError:
        pass
    fresh = interop.convert(a, "torch", copy=True)
    return {
        "aliases": fresh.data_ptr() == a.ctypes.data,
        "explained_zero_copy": interop.explain(a, "torch", copy=True).zero_copy,
    }


def copy_false_after_copy_zero() -> str:
    """In a fresh process: `copy=0` on a reversed view first, then copy=False."""
    a = aligned(8, "int16")[::-1]
    try:
        interop.convert(a, "torch", copy=0)
    except TypeError:
        pass
    try:
        interop.convert(a, "torch", copy=False)
    except interop.CopyForbiddenError:
        return "refused"
    return "copied silently"


def test_no_plan_cache_key_conflates_copy_true_with_one():
    require("torch")
    with Worker() as fresh:
        result = fresh.call(copy_true_after_copy_one).unwrap()
    assert result == {"aliases": False, "explained_zero_copy": False}, result


def test_no_plan_cache_key_conflates_copy_false_with_zero():
    require("torch")
    with Worker() as fresh:
        assert fresh.call(copy_false_after_copy_zero).unwrap() == "refused"


# --- 4. read-only memory stays read-only after any number of hops --------------------------------
def _bytes_at_64(payload: bytes) -> bytes:
    """An immutable bytes object holding `payload` whose data is 64-byte aligned (so JAX and
    TensorFlow share it instead of copying)."""
    keep = []
    for _ in range(256):
        candidate = bytes(bytearray(payload))
        if np.frombuffer(candidate, np.uint8).ctypes.data % 64 == 0:
            return candidate
        keep.append(candidate)
    raise AssertionError("no 64-byte aligned bytes object in 256 tries")


_KEEP: list[Any] = []  # what read-only sources live on (a bytes object, an mmap)


def _read_only_source(kind: str) -> Any:
    """A read-only float32 NumPy array of 5..12, 64-byte aligned: writeable=False, over an
    immutable bytes object, or over a read-only memory map (writing it faults)."""
    if kind == "flag":
        a = aligned(8)
        a.flags.writeable = False
        return a
    payload = np.arange(5, 13, dtype=np.float32).tobytes()
    if kind == "bytes":
        owner: Any = _bytes_at_64(payload)
    else:
        assert kind == "mmap"
        with tempfile.TemporaryFile() as handle:
            handle.write(payload)
            handle.flush()
            owner = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    _KEEP.append(owner)
    return np.frombuffer(owner, np.float32, count=8)


def read_only_after_hops(kind: str, chain: list[str]) -> str:
    """Read-only memory through `chain` (zero-copy hops into JAX or TensorFlow, which cannot
    write, then a last hop into any consumer): writing through the end never reaches it."""
    src = _read_only_source(kind)
    before = src.tobytes()
    x: Any = src
    for hop in chain[:-1]:
        x = interop.convert(x, hop)
    still_shared = REGISTRY.get(chain[-2]).data_address(x) == src.ctypes.data
    last = REGISTRY.get(chain[-1])
    if still_shared and last.capabilities().import_access == "writable":
        with pytest.raises(interop.InteropError) as err:
            interop.convert(x, last.name, copy=False)
        assert isinstance(err.value, BufferError), type(err.value)
    y = interop.convert(x, last.name)
    assert last.to_bytes(y) == before, "values changed on the way"
    wrote = last.mutate(y)
    assert src.tobytes() == before, f"a write through the {last.name} result reached the source"
    return "written (a copy)" if wrote else "not writable"


CHAINS = [["jax"], ["tensorflow"], ["jax", "tensorflow"], ["tensorflow", "jax"]]


@pytest.mark.parametrize("target", ["torch", "mxnet", "paddle", "numpy"])
@pytest.mark.parametrize("chain", CHAINS, ids="-".join)
@pytest.mark.parametrize("kind", ["flag", "bytes"])
def test_read_only_memory_stays_read_only_after_hops(worker, kind, chain, target):
    require(*chain, target)
    worker.call(read_only_after_hops, kind, [*chain, target]).unwrap()


@pytest.mark.parametrize("chain", [["jax", "torch"], ["tensorflow", "torch"]], ids="-".join)
def test_really_read_only_memory_is_never_written(worker, chain):
    """Over a read-only memory map a write faults: today that kills the process."""
    require(*chain)
    worker.call(read_only_after_hops, "mmap", chain).unwrap()


# --- 5. writing through a result never corrupts TensorFlow's cached constants --------------------
def tensorflow_constant_survives(target: str, value: float, dtype: str) -> float:
    """`t = convert(tf.constant(1.0), "torch"); t.mul_(3)` must not change the constant."""
    import tensorflow as tf

    # (one element of one dimension where the target has no 0-d tensors: MXNet)
    shape = [1] if REGISTRY.get(target).capabilities().min_ndim else []
    result = interop.convert(tf.constant(value, dtype=dtype, shape=shape), target)
    if target == "torch":
        result.mul_(3)
    else:
        assert REGISTRY.get(target).mutate(result)  # sets it to 1
    return float(tf.constant(value, dtype=dtype, shape=shape).numpy().reshape(()))


def test_writing_through_a_result_never_changes_tensorflow_constants():
    require("tensorflow")
    cases = [("torch", 1.0, "float32"), ("torch", 7, "int32")]
    cases += [("mxnet", 2.5, "float32"), ("paddle", 3.5, "float32")]
    cases = [c for c in cases if installed(c[0])]
    with Worker() as fresh:  # a corrupted constant cache lasts for the rest of the process
        got = {c: fresh.call(tensorflow_constant_survives, *c).unwrap() for c in cases}
    wrong = {f"{t} {v!r}": g for (t, v, _), g in got.items() if g != v}
    assert not wrong, f"tf.constant(v) after writing through a converted one: {wrong}"


def test_immutable_jax_buffers_still_reach_torch_zero_copy_by_default():
    require("jax", "torch")
    import jax.numpy as jnp

    x = jnp.arange(12.0)
    assert interop.explain(x, "torch").zero_copy
    assert interop.convert(x, "torch").data_ptr() == x.unsafe_buffer_pointer()


# --- 6. torch lazy views keep their sign --------------------------------------------------------
def _neg_or_conj_refused(err: interop.InteropError) -> None:
    text = str(err).lower()
    assert "neg" in text or "conj" in text, f"the refusal does not name the view's bit: {err}"


def _signed_views() -> dict[str, tuple[Any, Any]]:
    """torch views with a lazy neg or conj bit, and their resolved values."""
    import torch

    z = torch.tensor([1 + 2j, 3 - 4j, -5 + 6j])
    imag = z.conj().imag
    neg = torch._neg_view(torch.tensor([1.0, -2.0, 3.0]))
    conj = z.conj()
    assert imag.is_neg() and neg.is_neg() and conj.is_conj()
    return {
        "conj-imag": (imag, imag.resolve_neg()),
        "neg-view": (neg, neg.resolve_neg()),
        "conj-view": (conj, conj.resolve_conj()),
    }


@pytest.mark.parametrize("view", ["conj-imag", "neg-view", "conj-view"])
@pytest.mark.parametrize("target", ["numpy", "jax", "tensorflow", "mxnet", "paddle"])
def test_torch_lazy_views_keep_their_sign(view, target):
    require("torch")
    require(target)
    x, resolved = _signed_views()[view]
    dst = REGISTRY.get(target)
    try:
        y = interop.convert(x, target)
    except interop.UnsupportedDTypeError:
        assert x.is_complex() and "complex64" not in dst.capabilities().import_dtypes
        return
    except interop.InteropError as refused:
        _neg_or_conj_refused(refused)
        return
    assert dst.to_bytes(y) == resolved.numpy().tobytes(), f"{view} reached {target} wrong"
    with pytest.raises(interop.InteropError) as err:  # resolving the bit is a copy
        interop.convert(x, target, copy=False)
    assert isinstance(err.value, BufferError | TypeError | ValueError)


# --- 7. resize_ after a zero-copy export: documented ------------------------------------------
def test_resize_after_export_is_documented_with_the_framework_hazards():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    mentions = [p.relative_to(ROOT) for p in pages if "resize_" in p.read_text()]
    assert mentions, "no page of README.md or docs/ says that torch's resize_ frees exports"


# --- untyped or wrong errors ------------------------------------------------------------------
@pytest.mark.parametrize("target", ["torch", "numpy", "jax", "tensorflow", "mxnet", "paddle"])
def test_a_capsule_with_a_byte_offset_is_copied_or_refused_typed(target):
    require(target)
    payload = np.arange(5, 17, dtype=np.float32).tobytes()
    capsule, token = counting_capsule(payload, "float32", (3, 4), byte_offset=64)
    dst = REGISTRY.get(target)
    try:
        y = interop.convert(capsule, target)
    except interop.InteropError as err:
        assert "byte_offset" in str(err) or "offset" in str(err), err
    else:
        assert dst.to_bytes(y) == payload, "the byte_offset was ignored"
        del y
    del capsule
    gc.collect()
    if hasattr(dst, "synchronize"):
        dst.synchronize()
    gc.collect()
    assert COUNTER.released(token) == 1


@pytest.mark.parametrize("device", ["cuda:abc", ("a", "b"), "cpu:1.5"], ids=repr)
def test_malformed_devices_are_typed_errors_naming_them(device):
    require("torch")
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.InteropError) as err:
            call(aligned(4), "torch", device=device)
        assert isinstance(err.value, ValueError | TypeError), type(err.value).__mro__
        culprit = device if isinstance(device, str) else "a"
        assert culprit in str(err.value), f"the error does not name {culprit!r}: {err.value}"


def test_a_cpu_index_the_host_does_not_have_is_a_device_error_naming_it():
    require("jax", "torch")
    import jax.numpy as jnp

    with pytest.raises(interop.DeviceError, match="cpu:1"):
        interop.convert(jnp.arange(3.0), "torch", device="cpu:1")
    with pytest.raises(interop.DeviceError, match="cpu:1"):
        interop.convert(aligned(3), "numpy", device="cpu:1")


@pytest.mark.parametrize("target", ["torch", "jax", "tensorflow", "mxnet", "paddle"])
def test_big_endian_arrays_are_refused_for_their_byte_order(target):
    require(target)
    x = np.arange(3, dtype=">f4")
    with pytest.raises(interop.InteropError) as err:
        interop.convert(x, target)
    text = str(err.value).lower()
    assert "byte order" in text or "endian" in text, f"the refusal hides the cause: {err.value}"


@pytest.mark.parametrize("target", ["numpy", "jax", "tensorflow", "mxnet", "paddle"])
def test_torch_meta_tensors_are_typed_errors_naming_the_device(target):
    require("torch")
    import torch

    require(target)
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.InteropError, match="meta"):
            call(torch.empty(3, device="meta"), target)


@pytest.mark.parametrize("target", ["torch", "jax", "tensorflow", "mxnet", "paddle"])
def test_masked_arrays_are_refused_not_stripped_of_their_mask(target):
    require(target)
    x = np.ma.masked_array(np.arange(4.0, dtype=np.float32), mask=[0, 1, 0, 0])
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.InteropError, match="mask"):
            call(x, target)


def test_converting_to_a_framework_that_is_not_installed_is_a_typed_error():
    require("paddle")
    code = """
        import sys
        sys.modules["paddle"] = None  # paddle is not installed, as far as Python can tell
        import numpy, interop
        try:
            interop.convert(numpy.ones(3, numpy.float32), "paddle")
        except interop.InteropError as err:
            assert "paddle" in str(err), err
            print("typed:", type(err).__name__)
        """
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "typed:" in out.stdout


# --- one bad plugin never breaks the others --------------------------------------------------
class _Producer:
    """A DLPack producer no adapter owns, over a NumPy array."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DEVICE_CODES["cpu"], 0)


def bad_plugin_is_isolated(kind: str) -> str:
    """In a fresh process: register a plugin broken in one way, then convert other things."""
    import types

    sys.modules.setdefault("badplugin_fw", types.ModuleType("badplugin_fw"))  # "imported"
    caps = interop.Capabilities(frozenset({"float32"}), frozenset({"float32"}))

    class Bad(interop.Adapter):
        name = f"bad_{kind.replace('-', '_')}"
        modules = () if kind == "no-modules" else ("badplugin_fw",)
        contract = (1, 0)  # the adapter contract it was written for (ignored before 1.0)

        def capabilities(self) -> interop.Capabilities:
            return caps

        if kind == "owns-raises":

            def tensor_types(self) -> tuple[type, ...]:
                return (type(self),)

            def owns(self, x: object) -> bool:
                raise RuntimeError("owns() is broken")

    try:
        interop.register(Bad())
    except interop.AdapterError as err:  # refused for its defect, named
        defect = {"no-modules": "modules", "no-tensor-types": "tensor_types", "owns-raises": "owns"}
        assert defect[kind] in str(err), f"refused, but not for its defect: {err}"
        refused = True
    else:
        refused = False
    payload = np.arange(5, 17, dtype=np.float32)
    capsule, _ = counting_capsule(payload.tobytes(), "float32", (12,))
    assert interop.convert(capsule, "numpy").tobytes() == payload.tobytes()
    assert interop.convert(_Producer(payload), "numpy").tobytes() == payload.tobytes()
    try:
        interop.convert(None, "numpy")
    except interop.UnsupportedTensorError:
        pass
    if refused:
        return "refused at register()"
    status = {i.name: i.status for i in interop.adapters()}[Bad.name]
    assert status == "broken", f"the bad plugin is {status!r}, not reported broken"
    return "marked broken"


@pytest.mark.parametrize("kind", ["no-modules", "no-tensor-types", "owns-raises"])
def test_one_bad_plugin_never_breaks_the_others(kind):
    with Worker() as fresh:
        fresh.call(bad_plugin_is_isolated, kind).unwrap()


def bad_stand_ins_are_isolated() -> str:
    """In a fresh process: a plugin whose `StandIns` hook raises is marked broken, naming the
    hook, the first time an object no adapter owns is met; conversions go on, NumPy's
    scalars (NumPy's own stand-ins) included."""
    import types

    from interop.roles import StandIns

    sys.modules.setdefault("badstandin_fw", types.ModuleType("badstandin_fw"))  # "imported"

    class Bad(interop.Adapter, StandIns):
        name = "bad_stand_ins"
        modules = ("badstandin_fw",)
        contract = (2, 1)

        def capabilities(self) -> interop.Capabilities:
            return interop.Capabilities(frozenset({"float32"}), frozenset({"float32"}))

        def tensor_types(self) -> tuple[type, ...]:
            return (type(self),)

        def stand_in_types(self) -> tuple[type, ...]:
            raise RuntimeError("stand_in_types() is broken")

    interop.register(Bad())
    payload = np.arange(5, 17, dtype=np.float32)
    assert interop.convert(_Producer(payload), "numpy").tobytes() == payload.tobytes()
    assert interop.convert(np.float32(2.5), "numpy").tolist() == 2.5
    info = {i.name: i for i in interop.adapters()}[Bad.name]
    assert info.status == "broken" and "stand_in_types" in str(info.error), info
    return "marked broken"


def test_a_plugin_whose_stand_ins_hook_raises_is_marked_broken():
    with Worker() as fresh:
        assert fresh.call(bad_stand_ins_are_isolated).unwrap() == "marked broken"


def alias_claimed_before_its_owner_loads() -> str:
    """In a fresh process: a runtime adapter claims "tf" before TensorFlow's adapter loads."""

    class Toy(interop.Adapter):
        name = "toyframework"
        aliases = ("tf",)
        modules = ("toyframework",)
        contract = (1, 0)

        def capabilities(self) -> interop.Capabilities:
            return interop.Capabilities(frozenset({"float32"}), frozenset({"float32"}))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            interop.register(Toy())
        except interop.AdapterError as err:
            assert "tf" in str(err), err
            return "refused"
        target = interop.explain(np.ones(2, np.float32), "tf").target
    assert target == "tensorflow", f'"tf" now means {target!r}'
    said = [str(w.message) for w in caught]
    said += [f"{i.error} {' '.join(i.notes)}" for i in interop.adapters() if i.name == Toy.name]
    assert any("tf" in text for text in said), "the alias conflict was silent"
    return "reported"


def test_an_alias_conflict_is_reported_never_silent():
    require("tensorflow")
    with Worker() as fresh:
        fresh.call(alias_claimed_before_its_owner_loads).unwrap()


def numpy_status() -> str:
    return {i.name: i.status for i in interop.adapters()}["numpy"]


def test_interop_disable_takes_aliases_too():
    with Worker(env={"INTEROP_DISABLE": "np"}) as fresh:
        assert fresh.call(numpy_status).unwrap() == "disabled"


SHADOW = """
from interop import Adapter
raise ImportError("this numpy plugin is broken: libbroken.so not found")
"""


@pytest.fixture(scope="module")
def broken_numpy_site(tmp_path_factory):
    """A folder where pip installed a broken distribution registering the name `numpy` whose
    name sorts before `interop-numpy`."""
    root = tmp_path_factory.mktemp("shadow")
    project = root / "src" / "aaa-broken-numpy"
    (project / "aaa_broken_numpy").mkdir(parents=True)
    (project / "aaa_broken_numpy" / "__init__.py").write_text(SHADOW)
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "aaa-broken-numpy"
        version = "0.0.1"
        [project.entry-points."interop.adapters"]
        numpy = "aaa_broken_numpy:Plugin"
        [tool.setuptools]
        packages = ["aaa_broken_numpy"]
        """)
    )
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation", "--target", str(site), str(project)]
    subprocess.run(pip, check=True, capture_output=True)
    return site


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def test_a_broken_distribution_never_shadows_a_working_adapter(broken_numpy_site):
    code = """
        import numpy, interop
        a = numpy.arange(3.0)
        assert interop.convert(a, "numpy") is a
        infos = {(i.name, i.distribution): i for i in interop.adapters()}
        assert infos[("numpy", "interop-numpy")].status == "loaded", infos
        broken = infos[("numpy", "aaa-broken-numpy")]
        print(broken.status, broken.error)
        """
    out = run_python(code, PYTHONPATH=str(broken_numpy_site))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("shadowed shadowed by interop-numpy"), out.stdout  # never run
    # chosen over NumPy's own adapter, it breaks and gives the name back
    out = run_python(
        code, PYTHONPATH=str(broken_numpy_site), INTEROP_ADAPTER_NUMPY="aaa-broken-numpy"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("broken ") and "libbroken.so" in out.stdout, out.stdout


# --- found by the harness: framework bugs the core works around ---------------------------------
def _sources_released(refs: list[Any]) -> str:
    """ "freed" once every weakly referenced source is gone, after the deferred releases."""
    gc.collect()
    REGISTRY.get("paddle").synchronize()
    gc.collect()
    alive = sum(ref() is not None for ref in refs)
    return "freed" if not alive else f"{alive} of {len(refs)} sources never released"


def paddle_round_trip(source: str, through: str = "numpy") -> str:
    """`source` -> paddle -> `through` -> paddle, each hop zero-copy, then everything freed:
    the way back is a second import of memory Paddle holds (a copy), and the tensor in the
    middle dies first, so only the deleters chain keeps Paddle's own import alive."""
    x = aligned(12)
    if source != "numpy":
        x = interop.convert(x, source, copy=True)
    refs = [weakref.ref(x)]
    first = interop.convert(x, "paddle")
    middle = interop.convert(first, through)
    del x, first
    gc.collect()
    back = interop.convert(middle, "paddle")
    del middle
    gc.collect()
    assert REGISTRY.get("paddle").to_bytes(back) == aligned(12).tobytes()
    assert float(back.sum()) == float(aligned(12).sum()) != 0  # Paddle's kernels
    del back
    return _sources_released(refs)


@pytest.mark.parametrize(
    ("source", "through"),
    [("numpy", "numpy"), ("torch", "numpy"), ("numpy", "torch"), ("numpy", "mxnet")],
)
def test_paddle_memory_back_into_paddle_frees_without_deadlock(source, through):
    """The fuzzer's chains hung here: freeing a Paddle tensor over memory Paddle had itself
    imported runs the producer's deleter under Paddle's deleter lock, which the inner release
    takes again (paddle.from_dlpack alone does the same: a self-deadlock in Paddle 3.3).
    Through MXNet, whose arrays cannot be weakly referenced, the memory outlives the Paddle
    tensor that sent it; and each chain once left its source unreleased (a second import of
    one address drops the first's deleter in Paddle 3.3)."""
    require("paddle", source, through)
    with Worker(timeout=30) as fresh:  # it takes seconds; a deadlock fails it at 30
        assert fresh.call(paddle_round_trip, source, through).unwrap() == "freed"


def paddle_round_trip_warm() -> str:
    """The same hops, three times over: the second and third go by the fast path, which must
    defer every import into Paddle just as the full path does, or the way back deadlocks
    when freed, and claim its address, or the way back leaks."""
    from interop.api import HUB

    refs = []
    for _ in range(3):
        source = aligned(12)
        refs.append(weakref.ref(source))
        first = interop.convert(source, "paddle")
        middle = interop.convert(first, "numpy")
        back = interop.convert(middle, "paddle")
        assert REGISTRY.get("paddle").to_bytes(back) == aligned(12).tobytes()
        del source, first, middle, back
        gc.collect()
    routes = HUB.routes.table.get(type(interop.convert(aligned(12), "paddle")), {})
    assert "numpy" in routes, "the route out of Paddle was not learned"
    return _sources_released(refs)


def test_paddle_memory_back_into_paddle_frees_without_deadlock_on_warm_routes():
    require("paddle")
    with Worker(timeout=30) as fresh:
        assert fresh.call(paddle_round_trip_warm).unwrap() == "freed"


def _raising_source(source: str) -> Any:
    """A 16-float tensor of `source` (a read-only NumPy array for "numpy-ro")."""
    x = aligned(16)
    if source == "numpy-ro":
        x.flags.writeable = False
    elif source != "numpy":
        x = interop.convert(x, source, copy=True)
    return x


def freed_while_raising(source: str, target: str, copy: bool | None) -> str:
    """`[convert(x, target), 1 / 0]`: the result is freed while ZeroDivisionError is on its
    way up, so whatever releases it runs with that exception pending. The core's deleters in
    pure Python are ctypes callbacks, which then fail: CPython replaced the exception with a
    SystemError and the release was lost (MXNet -> NumPy, read-only NumPy -> TensorFlow,
    everything into Paddle). Reported: what was caught, what went unraisable, what leaked."""
    unraisable: list[str] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: unraisable.append(repr(u.exc_value))
    caught, refs = [], []
    for _ in range(3):
        x = _raising_source(source)
        try:
            refs.append(weakref.ref(x))
        except TypeError:  # (MXNet arrays cannot be weakly referenced)
            pass
        try:
            [interop.convert(x, target, copy=copy), 1 / 0]
        except ZeroDivisionError:
            caught.append("ZeroDivisionError")
        except Exception as exc:
            caught.append(type(exc).__name__)
        del x
    gc.collect()
    interop.capsule.flush_deferred()
    gc.collect()
    sys.unraisablehook = hook
    alive = sum(ref() is not None for ref in refs)
    return f"caught {sorted(set(caught))}, unraisable {unraisable}, {alive} sources alive"


RAISING = [
    (s, t, None)
    for s in ("numpy", "numpy-ro", "torch", "jax", "tensorflow", "mxnet", "paddle")
    for t in ("numpy", "torch", "jax", "tensorflow", "mxnet", "paddle")
]
RAISING += [(s, "paddle", True) for s in ("numpy", "torch", "tensorflow", "mxnet")]


@pytest.mark.parametrize(("source", "target", "copy"), RAISING)
def test_a_result_freed_while_an_exception_is_raised_keeps_it_and_is_released(
    worker, source, target, copy
):
    require(source.partition("-")[0], target)
    report = worker.call(freed_while_raising, source, target, copy).unwrap()
    assert report == "caught ['ZeroDivisionError'], unraisable [], 0 sources alive", report


# --- the command line: bad values are a message and a non-zero exit ---------------------------
@pytest.mark.parametrize(
    "args, culprit",
    [
        (["--repeats", "0"], "repeats"),
        (["--frameworks", "bogus"], "bogus"),
        (["--dtypes", "foo"], "foo"),
    ],
    ids=["repeats-0", "frameworks-bogus", "dtypes-foo"],
)
def test_matrix_refuses_bad_values_with_a_message(args, culprit):
    require("torch")
    base = {"--frameworks": ["numpy", "torch"], "--dtypes": ["float32"], "--repeats": ["2"]}
    base[args[0]] = args[1:]
    argv = [item for key, values in base.items() for item in (key, *values)]
    out = subprocess.run(
        [sys.executable, "-m", "interop", "matrix", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0, f"exit status 0 for {args}:\n{out.stdout[-800:]}"
    assert "Traceback" not in out.stderr, out.stderr[-1500:]
    assert culprit in out.stdout + out.stderr, "the message does not name the bad value"


# --- the registry keeps no dynamic class alive ------------------------------------------------
def test_the_registry_keeps_no_dynamic_class_alive():
    refs = []
    for i in range(300):
        kind = type(f"Dynamic{i}", (_Producer,), {})
        interop.inspect(kind(np.arange(3.0)))
        refs.append(weakref.ref(kind))
        del kind
    gc.collect()
    alive = sum(ref() is not None for ref in refs)
    assert alive == 0, f"{alive} of 300 classes seen once are still alive"


# --- streams: normalised per device type --------------------------------------------------------
class _StreamSink(interop.Adapter):
    """A consumer declaring CUDA and ROCm whose current stream a test sets."""

    name = "safety_stream_sink"
    modules = ("safety_stream_sink_fw",)
    contract = (1, 0)
    current: Any = None

    def unavailable(self) -> str | None:
        return None  # a stand-in framework: nothing to install

    def capabilities(self) -> interop.Capabilities:
        return interop.Capabilities(
            export_dtypes=frozenset({"float32"}),
            import_dtypes=frozenset({"float32"}),
            imports=frozenset({"capsule_versioned"}),
            devices=frozenset({"cpu", "cuda", "rocm"}),
        )

    def consumer_stream(self, device: interop.Device) -> Any:
        return self.current

    def from_dlpack(self, source: Any) -> Any:
        return interop.inspect(source.take() if hasattr(source, "take") else source)


class _Recorder:
    """A producer labelling host memory as a GPU's, recording the stream it is handed."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DEVICE_CODES[self.device], 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.streams.append(kwargs.get("stream", "none given"))
        capsule, _ = counting_capsule(bytes(16), "float32", (4,), device=(self.device, 0))
        return capsule


@pytest.fixture
def sink():
    adapter = _StreamSink()
    interop.register(adapter, replace=True)
    return adapter


@pytest.mark.parametrize(
    "device, consumer, user, allowed",
    [
        # the legacy default stream, said explicitly
        pytest.param("cuda", None, None, {1}, id="cuda-no-consumer-stream"),
        # torch's raw cuda_stream on the default stream is 0
        pytest.param("cuda", 0, None, {1}, id="cuda-consumer-0"),
        pytest.param("cuda", 2, None, {2}, id="cuda-consumer-per-thread-2"),
        pytest.param("cuda", 0x7F00, None, {0x7F00}, id="cuda-consumer-stream"),
        # 0 is disallowed for CUDA
        pytest.param("cuda", None, 0, {1, "refused"}, id="cuda-user-0"),
        # ROCm's default stream is 0; 1 and 2 are disallowed there
        pytest.param("rocm", None, None, {0}, id="rocm-no-consumer-stream"),
        pytest.param("rocm", 0, None, {0}, id="rocm-consumer-0"),
        pytest.param("rocm", None, 1, {0, "refused"}, id="rocm-user-1"),
        pytest.param("rocm", None, 2, {0, "refused"}, id="rocm-user-2"),
    ],
)
def test_streams_are_normalised_per_device_type(sink, device, consumer, user, allowed):
    sink.current = consumer
    producer = _Recorder(device)
    err = interop.explain(producer, sink.name, stream=user).error
    if err is not None:
        assert "refused" in allowed, f"refused: {err}"
        assert isinstance(err, ValueError), type(err).__mro__
        assert "stream" in str(err), err
        return
    (handed,) = producer.streams
    assert handed in allowed, f"a {device} producer was handed stream {handed!r}"


def test_torch_hands_producers_a_real_cuda_stream():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch here")
    producer = _Recorder("cuda")
    interop.explain(producer, "torch")
    assert producer.streams and producer.streams[0] not in (0, None, "none given")


# --- refusals are also what the target framework's own import raises ------------------------
#: the builtin classes a refusal may need to be an instance of (Exception: nothing to keep)
FRAMEWORK_KINDS = (BufferError, NotImplementedError, RuntimeError, ValueError, TypeError)


def _refused_input(name: str) -> Any:
    """A tensor some framework's own import refuses, by name."""
    if name == "numpy byte-swapped":
        return np.arange(3, dtype=">f4")
    if name == "numpy datetime64":
        return np.zeros(3, "M8[D]")
    if name == "numpy odd strides":  # 6-byte strides over float32
        return np.lib.stride_tricks.as_strided(np.zeros(16, np.float32), (3,), (6,))
    import torch

    if name == "torch quantized":
        return torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        return {"torch complex32": torch.ones(3, dtype=torch.complex32)}[name]


def _own_import(target: str, x: Any) -> Any:
    """`x` imported by the target framework's own from_dlpack, as a program would call it."""
    if target == "numpy":
        return np.from_dlpack(x)
    if target == "torch":
        import torch

        return torch.from_dlpack(x)
    if target == "jax":
        import jax.numpy as jnp

        return jnp.from_dlpack(x)
    if target == "tensorflow":
        import tensorflow as tf

        return tf.experimental.dlpack.from_dlpack(x.__dlpack__())
    if target == "paddle":
        from interop_paddle import import_paddle

        return import_paddle().from_dlpack(x)
    if target == "mlx":
        import mlx.core as mx

        return mx.from_dlpack(x)
    from interop_mxnet import import_mxnet

    return import_mxnet().nd.from_dlpack(x.__dlpack__())


def refusal_is_what_the_framework_raises(target: str, name: str) -> str:
    """The framework's own import of the input (the oracle) and interop.convert's: the latter
    is also an instance of the builtin class of the former. Returns that class's name."""
    x = _refused_input(name)
    try:
        _own_import(target, x)
    except Exception as exc:
        own = exc
    else:
        return "accepted"
    kind = next(c for c in type(own).__mro__ if c in (*FRAMEWORK_KINDS, Exception))
    with pytest.raises(interop.InteropError) as err:
        interop.convert(x, target)
    assert isinstance(err.value, kind), (
        f"{target}'s own import raised {type(own).__name__} ({kind.__name__}), "
        f"interop.convert {type(err.value).__mro__}: {err.value}"
    )
    assert isinstance(err.value, (interop.UnsupportedDTypeError, interop.UnsupportedTensorError))
    assert isinstance(err.value, TypeError)  # the bases it always had
    return kind.__name__


REFUSALS = {  # input -> what the frameworks' own imports raise (measured)
    "numpy byte-swapped": "BufferError",
    "numpy datetime64": "BufferError",
    "numpy odd strides": "BufferError",
    "torch quantized": "BufferError",
    "torch complex32": None,  # each framework its own: RuntimeError, ValueError, ...
}


@pytest.mark.parametrize(
    "target", ["numpy", "torch", "jax", "tensorflow", "paddle", "mlx", "mxnet"]
)
@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_are_also_what_the_target_frameworks_own_import_raises(worker, name, target):
    source = name.partition(" ")[0]
    if source == target:
        pytest.skip("the same framework: returned as it is")
    require(source, target)
    kind = worker.call(refusal_is_what_the_framework_raises, target, name).unwrap()
    if REFUSALS[name] and target != "mlx":  # (mx.from_dlpack refuses the object: TypeError)
        assert kind == REFUSALS[name]


def copy_forbidden_is_what_the_framework_raises(target: str) -> str:
    """copy=False where memory cannot be shared: JAX (an unaligned buffer) and MLX (host
    memory, always copied) raise ValueError themselves; the array API says BufferError."""
    x = aligned(12, misalign=16)
    try:
        if target == "jax":
            import jax.numpy as jnp

            jnp.from_dlpack(x, copy=False)
        else:
            import mlx.core as mx

            mx.from_dlpack(x, copy=False)
    except Exception as exc:
        own = exc
    else:
        raise AssertionError(f"{target} shared it")
    with pytest.raises(interop.CopyForbiddenError) as err:
        interop.convert(x, target, copy=False)
    assert isinstance(err.value, type(own)) and isinstance(err.value, BufferError), err.value
    return type(own).__name__


@pytest.mark.parametrize("target", ["jax", "mlx"])
def test_copy_forbidden_is_a_buffer_error_and_what_jax_and_mlx_raise(worker, target):
    require(target)
    assert worker.call(copy_forbidden_is_what_the_framework_raises, target).unwrap() == (
        "ValueError"
    )
