"""The capsule toolkit: reading, naming, bridging, and releasing memory exactly once."""

import ctypes
import gc
import struct

import pytest

import interop
from interop import capsule as cap
from interop import dlpack as dl
from interop.capsule import Held
from interop.exchange import Exchange
from interop.info import CANONICAL, read_capsule
from interop.testing import COUNTER, counting_capsule

PAYLOAD = struct.pack("=12f", *range(12))


def test_every_dlpack_1_1_dtype_code_has_a_name():
    expected = {
        (0, 8): "int8",
        (1, 64): "uint64",
        (2, 16): "float16",
        (4, 16): "bfloat16",
        (5, 128): "complex128",
        (6, 8): "bool",
        (7, 8): "float8_e3m4",
        (8, 8): "float8_e4m3",
        (9, 8): "float8_e4m3b11fnuz",
        (10, 8): "float8_e4m3fn",
        (11, 8): "float8_e4m3fnuz",
        (12, 8): "float8_e5m2",
        (13, 8): "float8_e5m2fnuz",
        (14, 8): "float8_e8m0fnu",
        (15, 6): "float6_e2m3fn",
        (16, 6): "float6_e3m2fn",
        (17, 4): "float4_e2m1fn",
    }
    for (code, bits), name in expected.items():
        assert dl.dtype_name(code, bits) == name
        assert dl.DTYPE_CODES[name] == (code, bits)
    assert dl.dtype_name(2, 32, 4) == "float32x4"
    assert dl.dtype_name(99, 8) == "code99_bits8"


def test_read_describes_without_consuming():
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), strides=None)
    info = read_capsule(capsule)
    assert (info.shape, info.strides, info.dtype) == ((3, 4), (4, 1), "float32")
    assert (info.device.type, info.device.id, info.version) == ("cpu", 0, (1, 0))
    assert info.layout == CANONICAL and not info.read_only
    assert cap.capsule_name(capsule) == dl.VERSIONED_NAME  # still unconsumed
    del capsule
    gc.collect()
    assert COUNTER.released(address) == 1


def test_null_strides_mean_row_major():
    capsule, _ = counting_capsule(PAYLOAD, "float32", (2, 3, 2))
    mt = cap.managed(cap.pointer(capsule)[0], True)
    mt.dl_tensor.strides = None
    assert read_capsule(capsule).strides == (6, 2, 1)


def test_byte_offset_is_honoured():
    pytest.importorskip("numpy")
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4), byte_offset=64)
    info = read_capsule(capsule)
    assert info.byte_offset == 64 and info.address == info.data + 64
    result = interop.convert(capsule, "numpy")  # bytes before data + 64 are zeros
    assert result.tobytes() == PAYLOAD
    assert result.__array_interface__["data"][0] == info.address


def test_unknown_major_version_is_refused_and_released_once():
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), version=(2, 0))
    with pytest.raises(interop.DLPackError, match="2.0 is not supported"):
        read_capsule(capsule)
    with pytest.raises(interop.DLPackError):
        interop.convert(capsule, "numpy")
    del capsule
    gc.collect()
    assert COUNTER.released(address) == 1


def test_newer_minor_version_is_read():
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4), version=(1, 7))
    assert read_capsule(capsule).version == (1, 7)


def test_consumed_and_foreign_capsules_are_refused():
    import datetime

    with pytest.raises(interop.DLPackError, match="not a DLPack capsule"):
        read_capsule(datetime.datetime_CAPI)
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4))
    cap.mark_used(capsule, True)
    with pytest.raises(interop.DLPackError, match="already consumed"):
        read_capsule(capsule)
    cap._set_name(capsule, dl.VERSIONED_NAME)  # give it back so its memory is freed


def test_a_consumed_capsule_is_refused_as_the_frameworks_refuse_it():
    # torch.from_dlpack raises RuntimeError for a capsule taken before, paddle.from_dlpack
    # ValueError: code catching those keeps catching convert's refusal
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4))
    cap.mark_used(capsule, True)
    for caught in (interop.DLPackError, TypeError, RuntimeError, ValueError):
        with pytest.raises(caught, match="already consumed"):
            interop.convert(capsule, "numpy")
    cap._set_name(capsule, dl.VERSIONED_NAME)  # give it back so its memory is freed


@pytest.mark.parametrize("read_only", [False, True])
def test_legacy_to_versioned_bridge_releases_once(read_only):
    bridges = cap.live_bridges()  # (tests before may hold some)
    np = pytest.importorskip("numpy")
    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 1):
        pytest.skip(f"NumPy {np.__version__} asks only for legacy capsules: nothing to bridge")
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
    exchange = Exchange(capsule, read_capsule(capsule))
    bridged = exchange.take_as(True, read_only=read_only)  # what the plan's Bridge step does
    assert cap.capsule_name(capsule) == dl.USED_LEGACY_NAME
    # without the accelerator NumPy makes the box (its release then runs in C), else the core
    numpy_boxes = cap.RELEASES.python_callbacks and np.lib.NumpyVersion(np.__version__) >= "2.3.0"
    assert cap.live_bridges() == bridges + (not numpy_boxes)
    result = np.from_dlpack(Held(bridged))
    assert result.tobytes() == PAYLOAD
    assert result.flags.writeable is (not read_only)
    assert COUNTER.released(address) == 0
    del result, exchange, capsule
    gc.collect()
    assert COUNTER.released(address) == 1
    assert cap.live_bridges() == bridges


def test_the_pure_runtime_asks_for_boxes_until_it_has_an_answer():
    from interop.releases import Releases

    runtime = Releases(lambda capsule, claim: None)
    assert runtime.boxes() is None  # (no finder: the core's own boxes)
    answers: list = [None, None, "boxes"]
    runtime.take_boxes_from(lambda: answers.pop(0))
    assert runtime.boxes() is None and runtime.boxes() is None  # NumPy not imported yet
    assert runtime.boxes() == "boxes" and runtime.boxes() == "boxes"
    assert answers == []  # found once, then kept
    runtime = Releases(lambda capsule, claim: None)
    runtime.take_boxes_from(lambda: False)  # decided: none, never asked again
    assert runtime.boxes() is None and runtime.boxes() is None


def test_boxes_come_from_numpys_adapter_and_a_broken_hook_gives_none(monkeypatch):
    np = pytest.importorskip("numpy")
    from interop.api import HUB
    from interop.engine import Hub

    hub = Hub(HUB.registry)
    boxes = hub.capsule_boxes()
    if np.lib.NumpyVersion(np.__version__) >= "2.3.0":
        assert type(boxes).__module__ == "interop_numpy.boxes"
    else:
        assert boxes is False

    class Broken:
        def imported(self):
            return True

        def capsule_boxes(self, releases):
            raise RuntimeError("a broken hook")

    monkeypatch.setattr(hub.registry, "role_holder", lambda role: Broken())
    assert hub.capsule_boxes() is False


def test_versioned_to_legacy_bridge_releases_once():
    torch = pytest.importorskip("torch")
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4))
    legacy = cap.bridge(capsule, to_versioned=False)
    assert cap.capsule_name(capsule) == dl.USED_VERSIONED_NAME
    assert cap.capsule_name(legacy) == dl.LEGACY_NAME
    tensor = torch.from_dlpack(legacy)
    assert tensor.numpy().tobytes() == PAYLOAD
    del tensor, legacy
    gc.collect()
    assert COUNTER.released(address) == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # (NumPy boxes one, not the other)
def test_unconsumed_bridge_releases_once(dtype):
    bridges = cap.live_bridges()  # (tests before may hold some)
    capsule, address = counting_capsule(PAYLOAD, dtype, (3, 4))
    legacy = cap.bridge(capsule, to_versioned=False)
    del capsule, legacy
    gc.collect()
    assert COUNTER.released(address) == 1
    assert cap.live_bridges() == bridges


def test_a_bridge_releases_through_the_deleter_of_its_own_tensor_whatever_their_number():
    bridges = cap.live_bridges()  # (tests before may hold some)
    # a producer that makes a deleter per tensor (a closure each, say): 70 distinct deleters,
    # more than the core keeps callables of; each tensor is released once, by its own
    calls: list[int] = []
    keep = []
    for serial in range(70):
        capsule, token = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
        struct_ = cap.managed(cap.pointer(capsule)[0], False)
        original = dl.DELETER(struct_.deleter)

        def own(address, serial=serial, original=original):
            calls.append(serial)
            original(address)

        keep.append(dl.DELETER(own))
        struct_.deleter = ctypes.cast(keep[-1], ctypes.c_void_p).value
        bridged = cap.bridge(capsule, to_versioned=True)
        assert cap.capsule_name(capsule) == dl.USED_LEGACY_NAME
        del capsule, bridged  # the bridged capsule dies unconsumed: its destructor releases
        gc.collect()
        assert calls == list(range(serial + 1))
        assert COUNTER.released(token) == 1
    assert len(cap._DELETERS) <= 64
    assert cap.live_bridges() == bridges


def test_a_bridged_tensor_with_no_deleter_is_left_alone():
    bridges = cap.live_bridges()  # (tests before may hold some)
    capsule, token = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False, deleter=False)
    strays = COUNTER.strays
    bridged = cap.bridge(capsule, to_versioned=True)
    del capsule, bridged
    gc.collect()
    assert COUNTER.released(token) == 0 and COUNTER.strays == strays
    assert cap.live_bridges() == bridges


def test_read_only_flag_is_never_dropped_silently():
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4), read_only=True)
    with pytest.raises(interop.ReadOnlyMemoryError) as info:
        cap.bridge(capsule, to_versioned=False)
    assert isinstance(info.value, BufferError)
    assert cap.capsule_name(capsule) == dl.VERSIONED_NAME  # untouched: still ours to free
    legacy = cap.bridge(capsule, to_versioned=False, allow_read_only=True)
    del capsule, legacy
    gc.collect()
    assert COUNTER.released(address) == 1


def test_exchange_hands_its_tensor_out_once():
    capsule, address = counting_capsule(PAYLOAD, "float32", (3, 4))
    exchange = Exchange(capsule, read_capsule(capsule))
    assert exchange.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError):
        exchange.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cpu"):
        exchange.__dlpack__(dl_device=(2, 0))
    first = exchange.__dlpack__(max_version=(1, 0))
    assert cap.capsule_name(first) == dl.VERSIONED_NAME
    with pytest.raises(interop.DLPackError, match="already handed"):
        exchange.__dlpack__(max_version=(1, 0))
    del first, capsule, exchange
    gc.collect()
    assert COUNTER.released(address) == 1


def test_retag_keeps_element_size():
    capsule, _ = counting_capsule(bytes(8), "uint8", (8,))
    with pytest.raises(interop.DLPackError):
        cap.retag(capsule, *dl.DTYPE_CODES["float32"])
    cap.retag(capsule, *dl.DTYPE_CODES["bool"])
    assert read_capsule(capsule).dtype == "bool"


def test_malformed_tensors_are_refused_not_crashed():
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4))
    t = cap.managed(cap.pointer(capsule)[0], True).dl_tensor
    t.ndim = -1
    with pytest.raises(interop.DLPackError, match="ndim"):
        read_capsule(capsule)
    t.ndim = 2
    t.shape = None
    with pytest.raises(interop.DLPackError, match="NULL shape"):
        read_capsule(capsule)


# x86-64 Linux user space ends below 2**47, aarch64's may reach 2**52 (docs/reliability.md)
USER_SPACE_END = {"x86_64": 1 << 47, "amd64": 1 << 47, "aarch64": 1 << 52, "arm64": 1 << 52}


def test_geometry_is_bounded_by_the_user_address_space_to_the_byte():
    import platform

    end = USER_SPACE_END.get(platform.machine().lower())
    if end is None:
        pytest.skip(f"no user address bound known for {platform.machine()}")
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4))
    t = cap.managed(cap.pointer(capsule)[0], True).dl_tensor
    data = t.data
    t.data = end - 64  # only described, never read: the last of its 48 bytes is at end - 17
    t.byte_offset = 16
    assert read_capsule(capsule).span() == (end - 48, 48)
    t.byte_offset = 17  # one byte beyond
    with pytest.raises(interop.DLPackError, match=r"outside any memory.*producer \(numpy"):
        read_capsule(capsule, "numpy")
    t.data, t.byte_offset = data, 44  # a reversed view from its last element: inside
    t.strides[0], t.strides[1] = -4, -1
    assert read_capsule(capsule).span() == (data, 48)
    t.byte_offset = 40  # one element before its buffer, and before address 0 from data 0
    assert read_capsule(capsule).span() == (data - 4, 48)
    t.data = None
    with pytest.raises(interop.DLPackError, match="outside any memory"):
        read_capsule(capsule)
    t.data, t.byte_offset, t.strides[0], t.strides[1] = data, 0, 4, 1


@pytest.fixture(autouse=True)
def _no_stray_deleter_calls():
    before = COUNTER.strays
    yield
    gc.collect()
    assert COUNTER.strays == before, "a deleter ran for memory already released"


@pytest.mark.parametrize(
    ("shape", "strides", "layout"),
    [
        ((3, 4), (4, 1), "canonical"),
        ((), (), "canonical"),
        ((3, 1), (1, 7), "contiguous"),  # odd stride on a size-1 dim
        ((0, 4), (0, 0), "contiguous"),  # NumPy's empty arrays: nothing to lay out
        ((3, 0), (0, 1), "contiguous"),
        ((4, 3), (1, 4), "permuted"),
        ((2, 3, 4), (12, 1, 3), "permuted"),
        ((3, 2), (4, 2), "strided"),
        ((3, 4), (0, 1), "broadcast"),
        ((3, 4), (-4, 1), "negative"),
    ],
)
def test_layout_classes(shape, strides, layout):
    from interop.info import classify_layout

    assert classify_layout(shape, strides) == layout


def test_null_data_and_impossible_shapes_are_refused_before_any_consumer_reads():
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4))
    t = cap.managed(cap.pointer(capsule)[0], True).dl_tensor
    data = t.data
    t.data = None
    with pytest.raises(interop.DLPackError, match="NULL data"):
        interop.convert(capsule, "numpy")
    t.data = data
    t.shape[0] = 1 << 61
    with pytest.raises(interop.DLPackError, match="impossibly large"):
        read_capsule(capsule)
    t.shape[0] = 3
    assert read_capsule(capsule).shape == (3, 4)


def test_many_conversions_from_many_threads_leak_nothing():
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    import threading

    tokens: list[int] = []
    errors: list[BaseException] = []
    # what earlier tests left (the "still" tests of Paddle's own leaks hand it raw capsules)
    gc.collect()
    owned, bridges = set(cap.RELEASES.owned), cap.live_bridges()

    def work() -> None:
        try:
            for i in range(300):
                a = np.arange(12, dtype=np.float32) + i
                t = interop.convert(a, "torch")  # capsule handed over as it is
                back = interop.convert(t, "numpy")  # versioned, through the exchange object
                assert back.tobytes() == a.tobytes()
                capsule, token = counting_capsule(a.tobytes(), "float32", (12,), versioned=False)
                tokens.append(token)
                assert interop.convert(capsule, "numpy").tobytes() == a.tobytes()  # bridged
                capsule, token = counting_capsule(a.tobytes(), "float32", (12,), read_only=True)
                tokens.append(token)
                assert interop.convert(capsule, "torch").numpy().tobytes() == a.tobytes()
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    assert not errors, errors[0]
    assert len(tokens) == 4 * 300 * 2
    assert all(COUNTER.released(token) == 1 for token in tokens)
    assert cap.live_bridges() == bridges and set(cap.RELEASES.owned) <= owned


EXCEPTION_IN_FLIGHT = """
import gc, numpy as np, interop
from interop import capsule as cap
from interop.testing import COUNTER, counting_capsule

def hold_then_raise():
    capsule, token = counting_capsule(bytes(16), "float32", (4,), versioned=False)
    try:
        held = [interop.convert(capsule, "numpy"), 1 / 0]  # a bridged tensor dies mid-raise
    except ZeroDivisionError:
        return token
    return None

token = hold_then_raise()
gc.collect()
print(token is not None, COUNTER.released(token), cap.live_bridges())
"""


@pytest.mark.skipif(
    not interop.api.HUB.routes.compiled,
    reason="needs the compiled deleters: a ctypes callback run while an exception is being "
    "raised makes CPython replace that exception (pure-Python mode keeps this limitation)",
)
def test_a_tensor_freed_while_an_exception_is_raised_keeps_the_exception():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", EXCEPTION_IN_FLIGHT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1", "0"], out.stdout + out.stderr
    assert "SystemError" not in out.stderr


HELD_PAST_EXIT = """
import collections
import numpy as np
from interop import capsule as cap

class Producer:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

source = np.arange(10, dtype=np.float32)
bridged = cap.bridge(source.__dlpack__(), to_versioned=True)  # released by the core's deleter
# held by a module the interpreter clears after interop.capsule: released once its globals
# are None, through a callback the interpreter would otherwise have freed
collections.held = np.from_dlpack(Producer(bridged))
print(collections.held.flags.writeable, collections.held.sum())
"""


@pytest.mark.parametrize("pure", ["1", "0"], ids=["pure", "compiled-if-built"])
def test_a_bridged_tensor_alive_at_interpreter_exit_is_released_without_a_crash(pure: str):
    import os
    import subprocess
    import sys

    env = dict(os.environ, INTEROP_PURE_PYTHON=pure)
    out = subprocess.run(
        [sys.executable, "-c", HELD_PAST_EXIT], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr  # (a segfault at exit was -11 in pure Python)
    assert out.stdout.split() == ["True", "45.0"], out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr


def test_held_gives_its_capsule_once_whatever_keywords_the_consumer_passes():
    capsule = object()
    held = Held(capsule)
    # NumPy passes dl_device, copy and max_version; torch max_version; JAX stream
    assert held.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=None, future=1) is capsule
    assert held.__dlpack__(stream=None) is None  # a second consumer gets nothing to free twice
    assert Held(capsule, device=(3, 0)).__dlpack_device__() == (3, 0)
