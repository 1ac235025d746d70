"""Device and stream negotiation, tested on every machine with producers that record calls.

The producers label host memory as CUDA and the consumer is a small plugin that declares
CUDA: the plan is made and the producer is asked for its capsule exactly as on a GPU, but no
framework ever reads those bytes.
"""

import ctypes
import gc

import pytest

import interop
from interop.testing import COUNTER, counting_capsule

SINK_STREAM = 4242


class Sink(interop.Adapter):
    """A consumer plugin declaring CUDA, with a known current stream."""

    name = "sink"
    modules = ("sink_fw",)
    contract = (1, 0)
    moved: list = []

    def unavailable(self):
        return None  # a stand-in framework: nothing to install

    def capabilities(self):
        return CAPS

    def consumer_stream(self, device):
        return SINK_STREAM if device.type == "cuda" else None

    def from_dlpack(self, source):
        return interop.inspect(source.take() if hasattr(source, "take") else source)

    def to_device(self, x, device):
        self.moved.append((x.device, device))
        return x._replace(device=device)


CAPS = interop.Capabilities(
    export_dtypes=frozenset({"float32"}),
    import_dtypes=frozenset({"float32"}),
    imports=frozenset({"capsule_versioned"}),
    devices=frozenset({"cpu", "cuda", "rocm"}),
)
interop.register(Sink(), replace=True)


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


def test_cuda_producer_gets_the_consumer_stream():
    producer = Recorder()
    plan = interop.explain(producer, "sink")
    assert plan.zero_copy and str(plan.device) == "cuda:0"
    (call,) = producer.calls
    assert call["stream"] == SINK_STREAM
    assert call["max_version"] == interop.dlpack.MAX_VERSION


def test_no_consumer_stream_means_the_default_stream_said_explicitly():
    producer = Recorder(("rocm", 0))  # the sink has no ROCm stream of its own
    interop.explain(producer, "sink")
    assert producer.calls[0]["stream"] == 0  # ROCm's default stream is 0 (1 and 2 are CUDA's)


def test_user_stream_is_handed_to_the_producer():
    producer = Recorder(("cuda", 1))
    interop.explain(producer, "sink", stream=12345)
    assert producer.calls[0]["stream"] == 12345


def test_cpu_producers_get_no_stream():
    producer = Recorder(("cpu", 0))
    interop.explain(producer, "sink", stream=7)
    assert "stream" not in producer.calls[0]


def test_cuda_tensor_into_a_cpu_only_framework_is_a_device_error():
    pytest.importorskip("numpy")
    with pytest.raises(interop.DeviceError, match=r"numpy cannot hold .* on cuda:0"):
        interop.convert(Recorder(), "numpy")


def test_device_moves_go_through_the_side_that_can():
    producer = Recorder()
    plan = interop.explain(producer, "sink", device="cpu")
    assert not plan.zero_copy and plan.copy_at == "device-target"
    assert "move from cuda:0 to cpu" in str(plan)
    result = interop.convert(producer, "sink", device="cpu")
    assert str(result.device) == "cpu" and Sink.moved[-1][1] == interop.Device("cpu", 0)
    with pytest.raises(interop.CopyForbiddenError, match="cpu was asked"):
        interop.convert(producer, "sink", device="cpu", copy=False)
    with pytest.raises(interop.DeviceError, match="sink cannot hold .* on vulkan"):
        interop.convert(producer, "sink", device="vulkan:0")


def test_inspect_reports_cuda_host_managed_and_rocm_devices():
    for kind in ("cuda", "cuda_host", "cuda_managed", "rocm"):
        capsule, _ = counting_capsule(bytes(16), "float32", (4,), device=(kind, 3))
        info = interop.inspect(capsule)
        assert (info.device.type, info.device.id) == (kind, 3)
        assert str(info.device) == f"{kind}:3"


def test_recorded_capsules_are_released_once():
    producer = Recorder()
    interop.explain(producer, "sink")
    interop.convert(producer, "sink")
    del producer.calls
    gc.collect()
    assert [COUNTER.released(t) for t in producer.tokens] == [1, 1]


class GpuOnly(Sink):
    """A consumer holding CUDA memory only, which copies host tensors in as it imports."""

    name = "gpuonly"

    def capabilities(self):
        return GPU_CAPS

    def from_dlpack_to(self, source, device):
        return ("copied onto", device, source.info.shape)


GPU_CAPS = interop.Capabilities(
    export_dtypes=frozenset({"float32"}),
    import_dtypes=frozenset({"float32"}),
    imports=frozenset({"object"}),
    devices=frozenset({"cuda"}),
    moves_from=frozenset({"cpu"}),
)
interop.register(GpuOnly(), replace=True)


def test_a_gpu_only_framework_copies_host_tensors_in_when_asked():
    capsule, token = counting_capsule(bytes(16), "float32", (4,))
    with pytest.raises(interop.DeviceError, match="ask for device='cuda'"):
        interop.convert(capsule, "gpuonly")
    plan = interop.explain(capsule, "gpuonly", device="cuda:0")
    assert plan.copy_at == "device-import" and "copy from cpu onto cuda:0" in str(plan)
    result = interop.convert(capsule, "gpuonly", device="cuda:0")
    assert result == ("copied onto", interop.Device("cuda", 0), (4,))
    del capsule
    gc.collect()
    assert COUNTER.released(token) == 1


class LegacyGpuFramework(Sink):
    """A producer framework that exports legacy capsules only (as TensorFlow and MXNet do)."""

    name = "legacygpu"

    def capabilities(self):
        return LEGACY_CAPS

    def tensor_types(self):
        return (LegacyTensor,)

    def export(self, x, *, writable=False):
        x.waited = True  # what TF's and MXNet's adapters do: finish pending work first
        capsule, token = counting_capsule(
            bytes(16), "float32", (4,), versioned=False, device=("cuda", 0)
        )
        x.tokens.append(token)
        return capsule


class LegacyTensor:
    __module__ = "legacygpu"

    def __init__(self):
        self.waited = False
        self.tokens = []


LEGACY_CAPS = interop.Capabilities(
    export_dtypes=frozenset({"float32"}),
    import_dtypes=frozenset({"float32"}),
    exports=frozenset({"capsule"}),
    imports=frozenset({"capsule"}),
    devices=frozenset({"cuda"}),
)
interop.register(LegacyGpuFramework(), replace=True)


def test_legacy_capsule_producers_are_synchronised_and_explain_says_so():
    x = LegacyTensor()
    plan = interop.explain(x, "sink")
    assert x.waited and any("carry no stream" in note for note in plan.notes)
    gc.collect()
    assert COUNTER.released(x.tokens[0]) == 1


class StreamRecorder:
    """A GPU-labelled producer that records the stream of every export (host bytes behind)."""

    def __init__(self, moves=False):
        self.memory = bytearray(16)
        self.streams, self.released, self.moves = [], [], moves

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        from interop import capsule as cap

        self.streams.append(stream)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.memory))
        data = base + 4 * len(self.streams) if self.moves else base
        return cap.capsule_over(
            data,
            (4,),
            (1,),
            "float32",
            self.memory,
            device=("cuda", 0),
            on_release=lambda: self.released.append(stream),
        )


def test_a_consumer_naming_another_stream_gets_the_capsule_ordered_on_it():
    # JAX hands producers a different stream on each import (a pool in XLA), not the one
    # it reported when the plan asked: the capsule is taken again on the stream it names
    from interop.exchange import Exchange

    producer = StreamRecorder()
    exchange = Exchange.from_source(producer, versioned=True, stream=5)
    assert exchange.__dlpack__(stream=5, max_version=(1, 0)) is not None  # same: not again
    assert producer.streams == [5]
    exchange = Exchange.from_source(producer, versioned=True, stream=7)
    capsule = exchange.__dlpack__(stream=9, max_version=(1, 0))
    gc.collect()
    assert producer.streams == [5, 7, 9] and producer.released == [5, 7]
    del capsule
    gc.collect()
    assert producer.released == [5, 7, 9]  # every capsule released once
    with pytest.raises(interop.DLPackError, match="already handed to a consumer"):
        exchange.__dlpack__(stream=11, max_version=(1, 0))  # given away: not taken again
    assert producer.streams == [5, 7, 9]


def test_a_producer_exporting_other_memory_when_asked_again_is_an_error():
    from interop.exchange import Exchange

    producer = StreamRecorder(moves=True)
    exchange = Exchange.from_source(producer, versioned=True, stream=7)
    with pytest.raises(interop.DLPackError, match="other memory"):
        exchange.__dlpack__(stream=9, max_version=(1, 0))
    gc.collect()
    assert producer.released == [9]  # the odd capsule dropped; the held one is still held
    exchange.release()
    gc.collect()
    assert producer.released == [9, 7]


class AlignedSink(Sink):
    """A consumer whose alignment rule differs per device, as JAX's does."""

    name = "alignedsink"
    modules = ("alignedsink_fw",)

    def capabilities(self):
        return ALIGNED_CAPS


ALIGNED_CAPS = interop.Capabilities(
    export_dtypes=frozenset({"float32"}),
    import_dtypes=frozenset({"float32"}),
    imports=frozenset({"capsule_versioned"}),
    devices=frozenset({"cpu", "cuda"}),
    import_alignment=64,
    unaligned_import="copy",
    alignment_by_device=(("cuda", 16, "refuse"),),
)
interop.register(AlignedSink(), replace=True)


@pytest.mark.parametrize(
    ("device", "offset", "zero_copy", "copy_at"),
    [
        # below 64 on the host: NumPy's aligned copy, shared (its importer would copy, slower)
        (("cpu", 0), 32, False, "source"),
        (("cuda", 0), 32, True, None),  # 16 is enough on the GPU
        # below 16 there: copied before the import (by a CUDA framework that can import the
        # capsule, where one is installed; refused, naming the rule, where none is)
        (("cuda", 0), 8, False, "intermediary"),
    ],
)
def test_alignment_rules_are_the_devices_own(device, offset, zero_copy, copy_at):
    capsule, _ = counting_capsule(bytes(64), "float32", (4,), device=device, byte_offset=offset)
    if copy_at == "intermediary":
        plan = interop.explain(capsule, "alignedsink")
        if isinstance(plan.error, interop.UnsupportedLayoutError):
            assert "16-byte aligned buffers on cuda" in str(plan.error)
            return
    else:
        plan = interop.explain(capsule, "alignedsink")
    assert plan.zero_copy == zero_copy and plan.copy_at == copy_at, str(plan)
    if not zero_copy:
        assert f"aligned buffers on {device[0]}" in str(plan)


class GpuTensor:
    __module__ = "gpusrc"


class GpuSource(Sink):
    """A framework holding tensors on the host and on GPUs, as JAX and torch do."""

    name = "gpusrc"
    modules = ("gpusrc",)

    def tensor_types(self):
        return (GpuTensor,)

    def export(self, x, *, writable=False):
        return counting_capsule(bytes(16), "float32", (4,), device=("cuda", 0))[0]


interop.register(GpuSource(), replace=True)


def test_a_gpu_tensor_into_a_host_framework_names_the_move_that_would_work():
    pytest.importorskip("numpy")
    with pytest.raises(interop.DeviceError) as info:
        interop.convert(GpuTensor(), "numpy")
    assert "numpy cannot hold" in str(info.value)
    assert "ask for device='cpu' to have gpusrc copy it there" in str(info.value)
    plan = interop.explain(GpuTensor(), "numpy", device="cpu")
    assert plan.copy_at == "device-source" and "move from cuda:0 to cpu" in str(plan)
