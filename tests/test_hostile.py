"""Hostile inputs: malformed DLPack capsules and misbehaving `__dlpack__` producers.

Each one, into every installed consumer, must give a typed `InteropError` that names what is
wrong — never a crash, a raw framework exception or a silently wrong tensor — and memory
handed over must be released exactly once (counted by `interop.testing.counting_capsule`).
A capsule with a NULL deleter is legal DLPack and must simply work.
Every case runs in a worker process (`interop.testing.isolation`): today a NULL deleter into
JAX aborts the process when the result is freed.
"""

from __future__ import annotations

import ctypes
import gc
import re
from typing import Any

import numpy as np
import pytest

import interop
from interop import capsule as cap
from interop.dlpack import DEVICE_CODES
from interop.registry import REGISTRY
from interop.testing import COUNTER, counting_capsule, explain_or_raise
from interop.testing.isolation import Worker
from interop.testing.suite import PAYLOAD, usable_adapters, use_result

CONSUMERS = ("numpy", "torch", "jax", "tensorflow", "mxnet", "paddle")

# PyCapsule_SetName keeps the pointer it is given: the names must outlive the capsules.
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
WRONG_NAME = ctypes.c_char_p(b"dltensor_but_not_quite")


def _struct(capsule: object) -> tuple[Any, bool]:
    address, versioned = cap.pointer(capsule)
    return cap.managed(address, versioned), versioned


# --- malformed capsules: (what to do to a fresh counting capsule, what the error must say) -------
def _wrong_name(capsule: object) -> None:
    _set_name(capsule, WRONG_NAME)


def _consumed(capsule: object) -> None:
    cap.mark_used(capsule, _struct(capsule)[1])


def _null_data(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.data = None


def _negative_shape(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.shape[0] = -3


def _absurd_ndim(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.ndim = 100_000


def _negative_ndim(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.ndim = -1


def _null_shape(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.shape = None


def _huge_shape(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.shape[0] = 1 << 61


def _major_version_2(capsule: object) -> None:
    managed, versioned = _struct(capsule)
    if versioned:
        managed.version.major = 2


def _unknown_dtype(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.dtype.code = 99


def _vector_lanes(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.dtype.lanes = 4


def _unknown_device(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.device.device_type = 99


# Impossible geometry: bytes addressed outside any user address space (below 2**52 on every
# platform interop runs on), which the copiers read, and crashed on, before the check.
def _huge_offset(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.byte_offset = 1 << 60


def _wrapping_offset(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.byte_offset = (1 << 64) - 64  # data + offset wraps round


def _far_strides(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.strides[0] = 1 << 50  # last row 2**53 bytes on


def _far_negative_strides(capsule: object) -> None:
    _struct(capsule)[0].dl_tensor.strides[0] = -(1 << 50)  # last row below address 0


MALFORMED = {
    "wrong-name": (_wrong_name, r"dltensor_but_not_quite"),
    "consumed": (_consumed, r"consumed"),
    "null-data": (_null_data, r"NULL data"),
    "negative-shape": (_negative_shape, r"negative"),
    "absurd-ndim": (_absurd_ndim, r"ndim"),
    "negative-ndim": (_negative_ndim, r"ndim"),
    "null-shape": (_null_shape, r"NULL shape"),
    "huge-shape": (_huge_shape, r"large"),
    "major-version-2": (_major_version_2, r"2\.0"),
    "unknown-dtype": (_unknown_dtype, r"code99"),
    "vector-lanes": (_vector_lanes, r"x4"),
    "unknown-device": (_unknown_device, r"99"),
    "huge-offset": (_huge_offset, r"outside any memory.*producer \(DLPack capsule"),
    "wrapping-offset": (_wrapping_offset, r"outside any memory.*producer \(DLPack capsule"),
    "far-strides": (_far_strides, r"outside any memory.*producer \(DLPack capsule"),
    "far-negative-strides": (
        _far_negative_strides,
        r"outside any memory.*producer \(DLPack capsule",
    ),
}


def malformed_capsule(kind: str, target: str, versioned: bool) -> str:
    """A malformed capsule into `target`: a typed error naming the fault, released once."""
    spoil, says = MALFORMED[kind]
    capsule, token = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=versioned)
    name = cap.capsule_name(capsule)
    spoil(capsule)
    with pytest.raises(interop.InteropError, match=says) as err:
        interop.convert(capsule, target)
    if kind not in ("unknown-device",):  # a device error has no builtin base to agree on
        assert isinstance(err.value, TypeError | ValueError), type(err.value).__mro__
    if kind in ("wrong-name", "consumed"):
        _set_name(capsule, ctypes.c_char_p(name))  # ours again: its destructor frees it
    del capsule, err
    _settle(target)
    assert COUNTER.released(token) == 1, f"released {COUNTER.released(token)} times"
    return "typed"


def _settle(target: str) -> None:
    """Let `target` free what it holds (MXNet frees on its engine), then check that no deleter
    ran twice."""
    gc.collect()
    sync = getattr(REGISTRY.get(target), "synchronize", None)
    if sync:
        sync()
    gc.collect()
    assert COUNTER.strays == 0, f"{COUNTER.strays} deleter calls for memory already released"


# --- a NULL deleter is legal DLPack: it must work -----------------------------------------------
def null_deleter(target: str, versioned: bool) -> str:
    """A capsule with a NULL deleter, converted, used and freed."""
    dst = REGISTRY.get(target)
    capsule, _ = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=versioned, deleter=False)
    y = interop.convert(capsule, target)
    assert dst.to_bytes(y) == PAYLOAD
    use_result(dst, y, "float32", PAYLOAD, "the result")
    del y, capsule
    _settle(target)  # JAX aborted here (std::bad_function_call)
    return "ok"


# --- hostile producers ----------------------------------------------------------------------
class Producer:
    """A DLPack producer whose two methods misbehave as the test says."""

    def __init__(self, dlpack: str = "ok", device: str = "ok") -> None:
        self.dlpack = dlpack
        self.device = device
        self.tokens: list[int] = []

    def __dlpack__(self, **kwargs: Any) -> Any:
        if self.dlpack == "raises":
            raise RuntimeError("this producer cannot export")
        if self.dlpack == "int":
            return 42
        if self.dlpack == "none":
            return None
        capsule, token = counting_capsule(PAYLOAD, "float32", (3, 4))
        self.tokens.append(token)
        return capsule

    def __dlpack_device__(self) -> Any:
        if self.device == "raises":
            raise RuntimeError("this producer cannot say where it is")
        if self.device == "none":
            return None
        if self.device == "one-tuple":
            return (DEVICE_CODES["cpu"],)
        return (DEVICE_CODES["cpu"], 0)


PRODUCERS = {
    "dlpack-raises": ({"dlpack": "raises"}, r"Producer|cannot export"),
    "dlpack-returns-int": ({"dlpack": "int"}, r"Producer|__dlpack__"),
    "dlpack-returns-none": ({"dlpack": "none"}, r"Producer|__dlpack__"),
    "device-raises": ({"device": "raises"}, r"Producer|__dlpack_device__"),
    "device-returns-none": ({"device": "none"}, r"Producer|__dlpack_device__"),
    "device-one-tuple": ({"device": "one-tuple"}, r"Producer|__dlpack_device__"),
}


def hostile_producer(kind: str, target: str) -> str:
    """A misbehaving producer into `target`: a typed error naming it; any capsule it made is
    released exactly once."""
    options, says = PRODUCERS[kind]
    producer = Producer(**options)
    for call in (interop.convert, explain_or_raise):
        try:
            call(producer, target)
        except interop.InteropError as err:
            assert re.search(says, str(err)), f"the error does not name the producer: {err}"
        else:
            raise AssertionError(f"{call.__name__} accepted a producer whose {kind}")
    _settle(target)
    released = [COUNTER.released(token) for token in producer.tokens]
    assert all(count == 1 for count in released), f"capsules released {released} times"
    return "typed"


# --- the tests: every case into every installed consumer, in a worker ----------------------------
def _consumers() -> list[str]:
    names = {a.name for a in usable_adapters()}
    return [c for c in CONSUMERS if c in names]


@pytest.fixture(scope="module")
def worker():
    with Worker(timeout=240) as shared:
        yield shared


def pytest_generate_tests(metafunc: Any) -> None:
    if "target" in metafunc.fixturenames:
        metafunc.parametrize("target", _consumers())


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_capsules_are_typed_errors_released_once(worker, kind, target, versioned):
    if kind == "major-version-2" and not versioned:
        pytest.skip("legacy capsules carry no version")
    worker.call(malformed_capsule, kind, target, versioned).unwrap()


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_null_deleter_capsule_converts_and_frees_safely(worker, target, versioned):
    worker.call(null_deleter, target, versioned).unwrap()


@pytest.mark.parametrize("kind", list(PRODUCERS))
def test_hostile_producers_are_typed_errors_naming_them(worker, kind, target):
    worker.call(hostile_producer, kind, target).unwrap()


# --- from threads -------------------------------------------------------------------------------
def malformed_from_threads(target: str) -> str:
    """Every malformed capsule into `target` from 8 threads at once, each thread also taking
    good tensors numpy -> paddle -> `target` (the chains whose releases deadlocked): each
    malformed one a typed error released once, every good one's values right, no hang."""
    from test_soak import eight_threads, make  # (the soak's harness: tests/ is on the path)

    kinds = list(MALFORMED)
    via = "paddle" if "paddle" in {a.name for a in usable_adapters()} else "numpy"
    for name in (via, target):  # imported here: Paddle's dygraph mode is its importer's
        make(name, np.zeros(2, np.float32))

    def one(k: int, i: int) -> None:
        malformed_capsule(kinds[(k + i) % len(kinds)], target, True)
        values = np.arange(12, dtype=np.float32) + (k * 1000 + i)
        y = interop.convert(interop.convert(values.copy(), via), target)
        assert REGISTRY.get(target).to_bytes(y) == values.tobytes(), "wrong values"

    errors, done = eight_threads(one, lambda i: i < len(kinds))
    _settle(target)
    assert not errors, "\n".join(errors)
    return f"{done} typed"


def test_malformed_capsules_from_eight_threads_are_typed_errors_released_once(worker, target):
    kinds = len(MALFORMED)
    assert worker.call(malformed_from_threads, target).unwrap() == f"{8 * kinds} typed"
