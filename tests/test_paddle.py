"""The PaddlePaddle plugin: the conformance kit as a plugin author runs it, plus Paddle's gaps.

Every test uses real Paddle tensors and real DLPack capsules. The `*_still_*` tests check the
measured Paddle behaviour the adapter's declarations rest on: if one fails, Paddle changed and
the declaration in interop_paddle should be revisited.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import interop
from interop.testing import COUNTER, ConformanceSuite, counting_capsule, explain_or_raise
from interop.testing.suite import DTYPES

interop_paddle = pytest.importorskip("interop_paddle")
if importlib.util.find_spec("paddle") is None:
    pytest.skip("paddlepaddle is not installed", allow_module_level=True)
np = pytest.importorskip("numpy")
paddle = interop_paddle.import_paddle()  # never a bare import: TensorFlow may be loaded
from interop.capsule import live_bridges, with_manager_ctx  # noqa: E402


class TestPaddle(ConformanceSuite):
    framework = "paddle"
    dtypes = (*DTYPES, "float8_e4m3fn", "float8_e5m2")


def _released(token: int) -> int:
    gc.collect()
    # every import into Paddle is released just after Paddle frees it, on the core's thread
    interop.registry.REGISTRY.get("paddle").synchronize()
    return COUNTER.released(token)


# --- discovery ---------------------------------------------------------------------------------
def test_entry_point_and_alias():
    found = {a.name: a for a in interop.adapters()}
    assert found["paddle"].status == "loaded", found["paddle"]
    assert found["paddle"].distribution == "interop-paddle"
    assert found["paddle"].framework_version == paddle.__version__
    y = interop.convert(np.arange(3, dtype=np.float32), "paddlepaddle")
    assert isinstance(y, paddle.Tensor)
    assert interop.convert(np.arange(3, dtype=np.float32), paddle).shape == [3]


def test_parameters_are_owned_and_exported_detached():
    w = paddle.create_parameter([2, 3], "float32")
    assert w.stop_gradient is False
    plan = interop.explain(w, "numpy")
    assert any("detached" in note for note in plan.notes), plan
    a = interop.convert(w, "numpy")
    assert a.__array_interface__["data"][0] == w.data_ptr()
    assert a.tolist() == w.numpy().tolist()


def test_sparse_tensor_refused_with_own_error():
    s = paddle.to_tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse_coo(2)
    with pytest.raises(interop.UnsupportedTensorError, match="sparse paddle tensor"):
        interop.convert(s, "numpy")


# --- declared gaps -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e3m4", "float8_e4m3"]
)
def test_float8_variants_refused_before_paddle_sees_them(dtype):
    capsule, token = counting_capsule(bytes(8), dtype, (8,))
    with pytest.raises(interop.UnsupportedDTypeError, match=dtype):
        interop.convert(capsule, "paddle")
    del capsule
    assert _released(token) == 1


def test_paddle_still_rejects_float8_fnuz():
    capsule, _ = counting_capsule(bytes(8), "float8_e4m3fnuz", (8,))
    with pytest.raises(NotImplementedError, match="illegal"):
        paddle.from_dlpack(capsule)


def test_byte_offset_is_copied_with_the_right_values():
    values = np.arange(8, dtype=np.float32)
    capsule, _ = counting_capsule(values.tobytes(), "float32", (4,), byte_offset=16)
    plan = interop.explain(capsule, "paddle")
    assert not plan.zero_copy and "byte_offset" in str(plan), plan
    with pytest.raises(interop.CopyForbiddenError, match="byte_offset"):
        interop.convert(capsule, "paddle", copy=False)
    y = interop.convert(capsule, "paddle")
    assert y.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]  # the 4 floats at data + 16


def test_paddle_still_ignores_byte_offset():
    values = np.arange(8, dtype=np.float32)
    capsule, _ = counting_capsule(values.tobytes(), "float32", (4,), byte_offset=16)
    y = paddle.from_dlpack(capsule)
    assert y.numpy().tolist() != [0.0, 1.0, 2.0, 3.0]  # it read from data, not data + 16


def test_read_only_numpy_is_copied_and_stays_unchanged():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    a.flags.writeable = False
    plan = interop.explain(a, "paddle")
    assert not plan.zero_copy and "read-only" in str(plan)
    y = interop.convert(a, "paddle")
    y[0, 0] = 42
    assert a[0, 0] == 0 and y.data_ptr() != a.__array_interface__["data"][0]


def test_paddle_still_writes_through_read_only_capsules():
    capsule, token = counting_capsule(bytes(24), "float32", (2, 3), read_only=True)
    y = paddle.from_dlpack(with_manager_ctx(capsule))
    y[0, 0] = 7.0
    assert ctypes.c_float.from_address(y.data_ptr()).value == 7.0
    del y, capsule
    assert _released(token) == 1


NEGATIVE_VIEWS = {
    "rows reversed": (slice(None, None, -1),),
    "columns reversed": (slice(None), slice(None, None, -1)),
    "step -2, offset": (slice(None, None, -2), slice(1, None)),
}


@pytest.mark.parametrize("view", list(NEGATIVE_VIEWS))
def test_negative_strides_copied_first(view):
    v = np.arange(24, dtype=np.float32).reshape(4, 6)[NEGATIVE_VIEWS[view]]
    plan = interop.explain(v, "paddle")
    assert not plan.zero_copy and "negative" in str(plan), plan
    y = interop.convert(v, "paddle")
    assert y.numpy().tobytes() == np.ascontiguousarray(v).tobytes()


def test_paddle_views_with_negative_strides_export_them():
    x = paddle.arange(12, dtype="float32").reshape([3, 4])
    info = interop.inspect(x[::-1])
    assert info.layout == "negative" and info.strides == (-4, 1)
    a = interop.convert(x[::-1], "numpy")  # NumPy takes negative strides: shared
    assert a.__array_interface__["data"][0] == x[::-1].data_ptr()
    assert a.tolist() == x.numpy()[::-1].tolist()


@pytest.mark.parametrize("strides", [(1, 4), (8, 2), (0, 1), (1, 9)], ids=str)
def test_positive_strided_and_broadcast_capsules_shared(strides):
    shape = (4, 3) if strides == (1, 4) else (3, 4) if strides != (1, 9) else (4, 1)
    payload = np.arange(32, dtype=np.float32).tobytes()
    capsule, token = counting_capsule(payload, "float32", shape, strides=strides)
    info = interop.inspect(capsule)
    y = interop.convert(capsule, "paddle", copy=False)
    assert y.data_ptr() == info.address
    full = np.frombuffer(payload, np.float32)
    expected = np.lib.stride_tricks.as_strided(full, shape, [4 * s for s in strides])
    assert y.contiguous().numpy().tobytes() == expected.tobytes()
    del y, capsule
    assert _released(token) == 1


# --- ownership: Paddle only releases capsules with a manager_ctx ------------------------------
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_paddle_still_skips_deleters_without_manager_ctx(versioned):
    capsule, token = counting_capsule(bytes(48), "float32", (3, 4), versioned=versioned)
    y = paddle.from_dlpack(capsule)
    del y, capsule
    assert _released(token) == 0  # a leak the adapter's re-wrapping avoids


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_rewrapped_capsule_released_once_when_unconsumed(versioned):
    capsule, token = counting_capsule(bytes(48), "float32", (3, 4), versioned=versioned)
    before = live_bridges()
    wrapped = with_manager_ctx(capsule)
    assert wrapped is not capsule and live_bridges() == before + 1
    del capsule
    assert _released(token) == 0  # the original capsule no longer owns the tensor
    del wrapped
    assert _released(token) == 1 and live_bridges() == before


def test_capsules_with_manager_ctx_are_passed_as_they_are():
    capsule = np.arange(4.0).__dlpack__(max_version=(1, 0))
    assert with_manager_ctx(capsule) is capsule


def test_numpy_source_released_after_paddle_result_dies():
    import weakref

    a = np.arange(6, dtype=np.float32)
    ref = weakref.ref(a)
    y = interop.convert(a, "paddle")
    del a
    gc.collect()
    assert ref() is not None
    del y
    gc.collect()
    interop.registry.REGISTRY.get("paddle").synchronize()  # the release runs on a thread
    assert ref() is None


# --- the fast import and exports (both paths use them) ----------------------------------------
def test_the_fast_import_is_probed_and_makes_what_from_dlpack_makes():
    fast = interop_paddle._fast_import()
    assert fast is not paddle.from_dlpack, "Paddle's pieces were not as probed"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    capsule, token = counting_capsule(a.tobytes(), "float32", (3, 4), align=64, versioned=True)
    address = interop.inspect(capsule).data
    y = fast(with_manager_ctx(capsule))  # (Paddle calls no deleter without manager_ctx)
    public = paddle.from_dlpack(a.__dlpack__(max_version=(1, 0)))
    assert type(y) is type(public) and y.place == public.place and y.stop_gradient
    assert (y.shape, y.dtype) == (public.shape, public.dtype) and y.data_ptr() == address
    assert float((y @ y.T).sum()) == float((public @ public.T).sum()) != 0  # Paddle kernels
    del y
    assert _released(token) == 1


def _capsules_over_one_buffer(count: int) -> tuple[list[object], list[int], object]:
    """`count` capsules over the same 16 float32 (manager_ctx set, as Paddle needs to free
    them), the number of times each one's deleter ran, and the buffer."""
    from interop import capsule as cap

    buffer = np.arange(16, dtype=np.float32)
    calls = [0] * count

    def counter(i: int):
        def count_call() -> None:
            calls[i] += 1

        return count_call

    capsules = [
        with_manager_ctx(
            cap.capsule_over(
                buffer.ctypes.data, (16,), (1,), "float32", buffer, on_release=counter(i)
            )
        )
        for i in range(count)
    ]
    return capsules, calls, buffer


def test_paddle_still_drops_the_first_release_of_an_address_imported_twice():
    # why one_import_per_address: Paddle files an import's deleter in a map keyed by the data
    # address, so the second import replaces the first's deleter, which never runs. If this
    # fails, Paddle keeps both: drop the flag (and the copies it causes)
    capsules, calls, _ = _capsules_over_one_buffer(2)
    first, second = (paddle.from_dlpack(c) for c in capsules)
    assert first.data_ptr() == second.data_ptr()
    del first, second, capsules
    gc.collect()
    assert sorted(calls) == [0, 1], calls


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-routes", "pure-routes"])
def test_memory_paddle_holds_is_copied_when_it_comes_again_and_each_release_runs_once(compiled):
    from interop.api import HUB, make_convert
    from interop.capsule import claimed_addresses
    from interop.engine import Hub

    convert = make_convert(Hub(HUB.registry, compiled=compiled))
    adapter = interop.registry.REGISTRY.get("paddle")
    adapter.synchronize()
    claims = claimed_addresses()
    capsules, calls, buffer = _capsules_over_one_buffer(4)
    address = buffer.ctypes.data
    held = [convert(capsules[0], "paddle"), convert(capsules[1], "paddle")]
    assert held[0].data_ptr() == address != held[1].data_ptr()  # shared, then copied
    assert claimed_addresses() == claims + 2  # the import, and the copy's
    with pytest.raises(interop.CopyForbiddenError, match="paddle already holds an import"):
        convert(capsules[2], "paddle", copy=False)
    for y in held:
        assert float((y * 2).sum()) == 240.0  # Paddle's kernels, on both
    del held, y
    adapter.synchronize()
    again = convert(capsules[3], "paddle")  # the address is free again: shared
    assert again.data_ptr() == address
    del again, capsules
    gc.collect()
    adapter.synchronize()
    assert calls == [1, 1, 1, 1] and claimed_addresses() == claims


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-routes", "pure-routes"])
def test_warm_routes_copy_a_tensor_paddle_holds_and_release_its_source(compiled):
    # the common case: the same array converted again while the last result lives (a loop
    # that reassigns it): the route must see the claim, and the source must not leak
    import weakref

    from interop.api import HUB, make_convert
    from interop.engine import Hub

    hub = Hub(HUB.registry, compiled=compiled)
    convert = make_convert(hub)
    weights = np.arange(64, dtype=np.float32)
    ref = weakref.ref(weights)
    result = None
    shared = []
    for _ in range(6):
        result = convert(weights, "paddle")
        shared.append(result.data_ptr() == weights.ctypes.data)
        assert float(result.sum()) == 2016.0
    assert np.ndarray in hub.routes.table and "paddle" in hub.routes.table[np.ndarray]
    assert shared == [True, False] * 3  # the previous result is alive at each call
    del weights, result
    gc.collect()
    interop.registry.REGISTRY.get("paddle").synchronize()
    assert ref() is None, "the array was never released"


def _passes_in_python(code: str) -> None:
    """`code` exits with 0 in a fresh Python, having printed ok (an abort fails one test)."""
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_the_fast_import_gives_way_to_paddle_in_static_mode():
    code = """
        import numpy as np, interop_paddle
        paddle = interop_paddle.import_paddle()
        fast = interop_paddle._fast_import()
        paddle.enable_static()
        out = fast(np.arange(4.0).__dlpack__())
        public = paddle.from_dlpack(np.arange(4.0).__dlpack__())
        assert type(out) is type(public) and not isinstance(out, paddle.Tensor), type(out)
        print("ok")
        """
    _passes_in_python(code)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-routes", "pure-routes"])
def test_warm_routes_give_what_paddle_gives_in_static_mode(compiled):
    # the routes import through Paddle's C exchange API, which makes a Tensor in either mode;
    # paddle.from_dlpack makes a DenseTensor in static mode: a route learned in dygraph mode
    # must hand a conversion made after enable_static() to the full path
    code = f"""
        import numpy as np, interop, interop_paddle
        from interop.api import HUB, make_convert
        from interop.engine import Hub
        paddle = interop_paddle.import_paddle()
        convert = make_convert(Hub(HUB.registry, compiled={compiled}))
        x = np.arange(4.0)
        for _ in range(3):
            warm = convert(x, "paddle")
            assert isinstance(warm, paddle.Tensor), type(warm)
            del warm
        paddle.enable_static()
        public = type(paddle.from_dlpack(np.arange(3.0).__dlpack__()))
        for _ in range(3):
            got = convert(x, "paddle")
            assert type(got) is public, (type(got), public)
            assert got._ptr() == x.ctypes.data  # still shared
            del got
        print("ok")
        """
    _passes_in_python(code)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-routes", "pure-routes"])
def test_releases_deferred_as_the_interpreter_exits_never_abort_it(compiled):
    # torch's deleter takes the GIL; a thread that takes it once the interpreter finalizes is
    # ended in place, inside torch's C++ (std::terminate: SIGABRT). The releases queued as a
    # script ends are done before that, or left to the process's end. Aborted 2 runs in 8
    # before (either route); racy, so six runs
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    code = f"""
        import torch, interop, interop_paddle
        from interop.api import HUB, make_convert
        from interop.engine import Hub
        convert = make_convert(Hub(HUB.registry, compiled={compiled}))
        kept = [convert(torch.full((64,), float(i)), "paddle") for i in range(300)]
        assert float(kept[7].sum()) == 7 * 64
        del kept  # 300 releases deferred to the core's thread as the interpreter exits
        print("ok", flush=True)
        """
    for _ in range(6):  # one after the other: run side by side, they never aborted
        _passes_in_python(code)


@pytest.mark.parametrize("versioned", [True, False])
def test_the_fast_exports_give_what_paddles_own_calls_give(versioned):
    x = paddle.arange(12, dtype="float32").reshape([3, 4])
    export = interop_paddle.PaddleAdapter().exporter(versioned, True, "float32")
    own = x.__dlpack__(max_version=(1, 3)) if versioned else paddle.utils.dlpack.to_dlpack(x)
    fast, slow = interop.inspect(export(x)), interop.inspect(own)
    assert fast == slow and fast.data == x.data_ptr()


# --- dtypes Paddle stores oddly ------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_kernel_less_unsigned_round_trip(dtype):
    a = np.array([[0, 1, 2], [np.iinfo(dtype).max, 7, 2 ** (np.iinfo(dtype).bits - 1) + 5]], dtype)
    y = interop.convert(a, "paddle")
    assert y.dtype == getattr(paddle, dtype) and y.dtype != paddle.bfloat16
    assert interop.inspect(y).dtype == dtype
    back = interop.convert(interop.convert(y, "paddle", copy=True), "numpy")
    assert back.dtype == a.dtype and back.tobytes() == a.tobytes()
    z = interop.convert(y.mT, "numpy", copy=True)  # copy of a strided view, no clone kernel
    assert z.tobytes() == np.ascontiguousarray(a.T).tobytes()


def test_c_exchange_api_is_declared_and_present():
    from interop.adapter import C_EXCHANGE_API

    assert C_EXCHANGE_API in interop_paddle.CAPS.exports
    api = type(paddle.ones([1])).__dlpack_c_exchange_api__
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi)
    )  # a private prototype: never the shared ctypes.pythonapi one
    assert get_name(api) == b"dlpack_exchange_api"


def test_versioned_export_is_1_3():
    x = paddle.ones([2, 2])
    info = interop.inspect(x)
    assert info.version == (1, 3) and not info.read_only


# --- import order: paddle after TensorFlow -----------------------------------------------------
@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed"
)
def test_paddle_usable_after_tensorflow_was_imported():
    code = textwrap.dedent(
        """
        import tensorflow as tf
        import numpy as np
        import interop
        y = interop.convert(np.arange(6, dtype=np.float32), "paddle")
        t = interop.convert(tf.constant([1.0, 2.0]), "paddle")
        print(y.numpy().sum(), t.numpy().tolist(), (y + 1).numpy()[0])
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:3] == ["15.0", "[1.0,", "2.0]"], done.stdout


# --- the fingerprint's shortcuts ------------------------------------------------------------------
def test_the_fingerprint_is_paddles_own_dtype_code_for_every_dtype():
    adapter = interop.registry.REGISTRY.get("paddle")
    seen = {}
    for name in sorted(interop_paddle.DTYPES):
        x = adapter.sample(name, (3, 4))
        seen[name] = adapter.fingerprint(x)
        assert seen[name] == getattr(paddle, name).value, name  # Paddle's own code
    assert len(set(seen.values())) == len(seen)  # no two dtypes share a fingerprint
    assert adapter.fingerprint(paddle.ones([3, 4]).astype("float32")[:, 1:3]) is None  # strided
    # an extent of one with row-major strides (a batch of one) is keyed as any other
    assert adapter.fingerprint(paddle.ones([3, 1])) == paddle.float32.value
    assert adapter.fingerprint(paddle.ones([3, 1]).transpose([1, 0])) is None  # strides [1, 1]
    grad = paddle.ones([3, 4])
    grad.stop_gradient = False
    assert adapter.fingerprint(grad) is None  # tracked by autograd


def test_host_only_is_what_paddle_says_of_its_devices():
    # this build's word: a CPU wheel with no device types beyond the CPU
    expected = not paddle.is_compiled_with_cuda() and not paddle.device.get_all_device_type()
    assert interop_paddle._host_only() is expected


class _OnAnotherDevice:
    """A stand-in for a Paddle tensor on a device a build with GPUs would have."""

    stop_gradient = True
    shape = [3, 4]

    def __init__(self):
        self.place = type("Place", (), {"is_cpu_place": lambda self: False})()
        self.dtype = paddle.float32

    def is_dense(self):
        return True

    def is_contiguous(self):
        return True


def test_a_build_with_devices_asks_each_tensor_for_its_place(monkeypatch):
    adapter = interop.registry.REGISTRY.get("paddle")
    interop_paddle._load_facts()  # (what the first fingerprint does)
    assert interop_paddle._HOST_ONLY is interop_paddle._host_only()
    monkeypatch.setattr(interop_paddle, "_HOST_ONLY", False)
    assert adapter.fingerprint(_OnAnotherDevice()) is None  # the full path: it is not on the CPU
    assert adapter.fingerprint(paddle.ones([3, 4])) == paddle.float32.value
    # and its export is Paddle's public one, which orders streams (no CPU shortcut)
    monkeypatch.setattr(paddle.utils.dlpack, "to_dlpack", lambda x: "public export")
    assert interop_paddle._export_legacy(_OnAnotherDevice()) == "public export"


def test_an_address_claimed_between_plan_and_import_is_planned_again(monkeypatch):
    # another thread importing the same memory after this conversion's plan said "share": the
    # claim at the re-wrap fails, and the conversion is planned again, as a copy
    from interop import capsule as cap
    from interop.api import HUB, make_convert
    from interop.engine import Hub

    convert = make_convert(Hub(HUB.registry))
    a = np.arange(16, dtype=np.float32)
    first = convert(a, "paddle")
    real, asked = cap.address_claimed, []

    def stale(address: int) -> bool:  # the answer of a moment before the other import
        asked.append(address)
        return False if len(asked) == 1 else real(address)

    monkeypatch.setattr(cap, "address_claimed", stale)
    second = convert(a, "paddle")
    assert len(asked) == 2, asked  # planned twice
    assert first.data_ptr() == a.ctypes.data != second.data_ptr()
    assert float((first + second).sum()) == 240.0


def test_a_loop_into_paddle_leaves_no_backlog_of_deferred_releases():
    # each import into Paddle is released by the core after Paddle frees it; left to the
    # releasing thread alone, a loop outruns it (the GIL is the loop's) and the backlog is
    # memory: conversions release what is queued as they start
    from interop import capsule as cap

    pending = cap.RELEASES.pending

    values = np.arange(2048, dtype=np.float32)
    worst = 0
    for i in range(300):
        y = interop.convert(values + i, "paddle")
        assert float(y[0]) == i
        del y
        worst = max(worst, pending())
    # a few at most: those the releasing thread took and waits for the GIL to release (one
    # run in several: 3); left to that thread alone, 29 waited after 300 conversions
    assert worst <= 10, f"{worst} releases were waiting at once"


class _Forwarding:
    """A DLPack producer that forwards to a Paddle tensor, answers and all."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


@pytest.mark.parametrize("target", ["numpy", "paddle"])
def test_paddles_own_device_answer_is_accepted_through_a_forwarding_object(target):
    t = paddle.to_tensor([1.5, 2.5, 3.5], dtype="float32")
    assert t.__dlpack_device__()[1] is None  # (kDLCPU, None): Paddle's own answer
    own = np.from_dlpack(_Forwarding(t))  # the oracle: NumPy takes it (torch, Paddle too)
    y = interop.convert(_Forwarding(t), target)
    assert interop.inspect(y).address == interop.inspect(t).address == own.ctypes.data
    used = y + 1
    assert (used.numpy() if target == "paddle" else used).tolist() == [2.5, 3.5, 4.5]


def test_more_dimensions_than_paddle_holds_are_refused_by_explain_and_convert():
    x = np.arange(2**12, dtype=np.float32).reshape((2,) * 12)
    with pytest.raises(RuntimeError, match="dimension"):
        paddle.from_dlpack(x)  # the oracle: Paddle's own importer fails on it
    for call in (explain_or_raise, interop.convert):
        with pytest.raises(interop.UnsupportedLayoutError, match="paddle .* at most 9 dimensions"):
            call(x, "paddle")
    nine = np.arange(6, dtype=np.float32).reshape((2,) + (1,) * 7 + (3,))
    assert interop.explain(nine, "paddle").zero_copy
    y = interop.convert(nine, "paddle")
    assert float((y + 1).sum()) == 21.0 and list(y.shape) == list(nine.shape)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-routes", "pure-routes"])
def test_a_warm_route_refuses_too_many_dimensions_before_paddle_takes_the_memory(compiled):
    # keys do not carry the number of dimensions: the compiled route handed an 11-D array to
    # Paddle's exchange import, which failed without releasing it (the DLPack API says the
    # tensor is stolen even then): its address stayed claimed, its source referenced, and a
    # later share of the same memory was refused under copy=False
    from interop.api import HUB, make_convert
    from interop.capsule import claimed_addresses
    from interop.engine import Hub

    convert = make_convert(Hub(HUB.registry, compiled=compiled))
    aligned = HUB.registry.get("numpy").copy  # compiled keys carry the alignment
    for _ in range(2):
        convert(aligned(np.ones((3, 4), np.float32)), "paddle")  # learns the route
    claims = claimed_addresses()
    x = aligned(np.arange(2**11, dtype=np.float32).reshape((2,) * 11))
    refs = sys.getrefcount(x)
    for _ in range(3):
        with pytest.raises(interop.UnsupportedLayoutError, match="at most 9 dimensions"):
            convert(x, "paddle")
    gc.collect()
    assert claimed_addresses() == claims and sys.getrefcount(x) == refs
    y = convert(x.reshape(64, 32), "paddle", copy=False)
    assert y.data_ptr() == x.ctypes.data and float(y.sum()) == float(x.sum())


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_zero_size_paddle_capsule_into_paddle_keeps_its_null_data_as_explained(pure):
    code = """
        from interop_paddle import import_paddle
        import interop
        paddle = import_paddle()
        t = paddle.zeros([0, 4], dtype="float32")
        own = paddle.from_dlpack(t.__dlpack__()).data_ptr()  # the oracle
        assert own == 0, own
        assert interop.explain(t.__dlpack__(), "paddle").zero_copy
        y = interop.convert(t.__dlpack__(), "paddle")
        assert y.data_ptr() == own, y.data_ptr()
        assert list((y + 1).shape) == [0, 4]
        print("ok")
        """
    env = {**os.environ, "INTEROP_PURE_PYTHON": pure}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env
    )
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]
