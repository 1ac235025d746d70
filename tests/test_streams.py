"""Device and stream negotiation, tested on every machine with producers that record calls.

The producers label host memory as CUDA: the plan is made and the producer is asked for its
capsule exactly as on a GPU, but no consumer ever reads the bytes.
"""

import gc

import pytest

import interop
from interop.testing import COUNTER, counting_capsule

pytest.importorskip("torch")  # a CUDA-capable target adapter, even on a CPU-only build


class Recorder:
    """A DLPack producer that records how the library called it."""

    def __init__(self, device=("cuda", 0)):
        self.device = device
        self.calls = []
        self.tokens = []

    def __dlpack_device__(self):
        return (interop.dlpack.DEVICE_CODES[self.device[0]], self.device[1])

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        capsule, token = counting_capsule(bytes(16), "float32", (4,), device=self.device)
        self.tokens.append(token)
        return capsule


def test_cuda_producer_gets_the_consumer_stream_never_an_implicit_none():
    producer = Recorder()
    plan = interop.explain(producer, "torch")
    assert plan.zero_copy and str(plan.device) == "cuda:0"
    (call,) = producer.calls
    assert call["stream"] is not None  # torch's current stream, or 1 (legacy default) said
    assert call["max_version"] == interop.dlpack.MAX_VERSION


def test_user_stream_is_handed_to_the_producer():
    producer = Recorder(("cuda", 1))
    interop.explain(producer, "torch", stream=12345)
    assert producer.calls[0]["stream"] == 12345


def test_cpu_producers_get_no_stream():
    producer = Recorder(("cpu", 0))
    interop.explain(producer, "torch", stream=7)
    assert "stream" not in producer.calls[0]


def test_cuda_tensor_into_a_cpu_only_framework_is_a_device_error():
    pytest.importorskip("numpy")
    producer = Recorder()
    with pytest.raises(interop.DeviceError, match=r"numpy cannot hold .* on cuda:0"):
        interop.convert(producer, "numpy")


def test_device_names_and_moves():
    producer = Recorder()
    with pytest.raises(interop.CopyForbiddenError, match="cpu was asked"):
        interop.convert(producer, "torch", device="cpu", copy=False)
    with pytest.raises(interop.DeviceError, match="no adapter owns it"):
        interop.convert(producer, "torch", device="cpu")
    plan = interop.explain(producer, "torch", device=interop.Device("cuda", 0))
    assert plan.zero_copy


def test_inspect_reports_cuda_host_managed_and_rocm_devices():
    for kind in ("cuda", "cuda_host", "cuda_managed", "rocm"):
        capsule, _ = counting_capsule(bytes(16), "float32", (4,), device=(kind, 3))
        info = interop.inspect(capsule)
        assert (info.device.type, info.device.id) == (kind, 3)
        assert str(info.device) == f"{kind}:3"


def test_recorded_capsules_are_released_once():
    producer = Recorder()
    interop.explain(producer, "torch")
    interop.explain(producer, "torch", stream=3)
    gc.collect()
    assert [COUNTER.released(t) for t in producer.tokens] == [1, 1]
