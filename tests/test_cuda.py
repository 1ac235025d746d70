"""CUDA conversions among PyTorch, JAX and CuPy: values, zero-copy by address, streams, moves.

Runs only where a GPU is visible; elsewhere every case skips and says why. On a GPU runner,
set INTEROP_REQUIRE_GPU=1 so that a missing GPU fails instead of skipping.
"""

import os

import pytest

import interop
from interop.registry import REGISTRY
from interop.testing import ConformanceSuite

pytestmark = pytest.mark.cuda
CUDA_FRAMEWORKS = ("torch", "jax", "cupy")
DTYPES = ("float32", "float16", "bfloat16", "int64", "uint8", "bool", "complex64")
SHAPE = (3, 4)


def _gpu_reason(name):
    try:
        adapter = REGISTRY.get(name)
    except interop.InteropError as exc:
        return str(exc)
    if adapter.unavailable():
        return adapter.unavailable()
    if "cuda" not in adapter.capabilities().devices:
        return f"the {name} adapter declares no CUDA device"
    return adapter.device_unavailable(interop.Device("cuda", 0))


def _usable():
    found = {name: _gpu_reason(name) for name in CUDA_FRAMEWORKS}
    return [n for n, why in found.items() if why is None], found


USABLE, REASONS = _usable()
WHY_SKIPPED = "; ".join(f"{n}: {why}" for n, why in REASONS.items() if why)


def test_a_gpu_is_visible_where_one_is_required():
    if os.environ.get("INTEROP_REQUIRE_GPU") == "1":
        assert USABLE, f"INTEROP_REQUIRE_GPU=1 but no CUDA framework sees a GPU: {WHY_SKIPPED}"
    elif not USABLE:
        pytest.skip(f"no GPU visible: {WHY_SKIPPED}")


def on_gpu(name, dtype):
    """A CUDA tensor made by the framework's own API (from its own CPU sample)."""
    adapter = REGISTRY.get(name)
    if name == "torch":
        return adapter.sample(dtype, SHAPE).to("cuda:0")
    if name == "jax":
        import jax

        return jax.device_put(adapter.sample(dtype, SHAPE), jax.devices("gpu")[0])
    return adapter.sample(dtype, SHAPE)  # CuPy arrays live on the GPU


PAIRS = [(s, d) for s in CUDA_FRAMEWORKS for d in CUDA_FRAMEWORKS if s != d]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pair", PAIRS, ids=[f"{s}-{d}" for s, d in PAIRS])
def test_cuda_pair_is_zero_copy_with_equal_values(pair, dtype):
    src_name, dst_name = pair
    for name in pair:
        if name not in USABLE:
            pytest.skip(f"{name}: {REASONS[name]}")
    src, dst = REGISTRY.get(src_name), REGISTRY.get(dst_name)
    x = on_gpu(src_name, dtype)
    plan = interop.explain(x, dst_name)
    exc = plan.error
    if isinstance(exc, interop.UnsupportedDTypeError):
        assert dtype in str(exc)
        pytest.skip(f"declared gap: {exc}")
    y = interop.convert(x, dst_name)
    assert dst.to_bytes(y) == src.to_bytes(x)
    assert plan.zero_copy, str(plan)
    assert dst.data_address(y) == src.data_address(x)
    info = interop.inspect(y)
    assert (info.device.type, info.device.id) == ("cuda", 0)


def _require(*names):
    for name in names:
        if name not in USABLE:
            pytest.skip(f"{name}: {REASONS[name]}")


@pytest.mark.parametrize("consumer", ["cupy", "jax"])
def test_producer_work_is_ordered_before_the_consumer_reads(consumer):
    _require("torch", consumer)
    import torch

    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keep the producer's stream busy
        x.fill_(7)
        y = interop.convert(x, consumer)  # the consumer's stream waits for `side`
        values = REGISTRY.get(consumer).to_bytes(y)
    assert values == torch.full((1 << 20,), 7.0).numpy().tobytes()


def test_user_named_stream_is_honoured():
    _require("torch", "cupy")
    import cupy
    import torch

    stream = cupy.cuda.Stream(non_blocking=True)
    x = torch.arange(1024.0, device="cuda")
    with stream:
        y = interop.convert(x, "cupy", stream=stream.ptr)
        assert cupy.asnumpy(y).tobytes() == x.cpu().numpy().tobytes()


def test_moves_between_host_and_device_are_explained_copies():
    _require("torch")
    import numpy as np
    import torch

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    plan = interop.explain(a, "torch", device="cuda:0")
    assert not plan.zero_copy and "cuda:0" in str(plan)
    t = interop.convert(a, "torch", device="cuda:0")
    assert t.device.type == "cuda" and t.cpu().numpy().tobytes() == a.tobytes()
    back = interop.convert(t, "numpy", device="cpu")
    assert back.tobytes() == a.tobytes()
    with pytest.raises(interop.DeviceError, match="numpy cannot hold"):
        interop.convert(t, "numpy")
    with pytest.raises(interop.CopyForbiddenError):
        interop.convert(a, "torch", device="cuda:0", copy=False)
    assert isinstance(t, torch.Tensor)


def test_cuda_to_cuda_between_devices():
    _require("torch")
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"one GPU visible ({torch.cuda.device_count()}); cuda:0 -> cuda:1 needs two")
    x = torch.arange(8.0, device="cuda:0")
    y = interop.convert(x, "torch", device="cuda:1")
    assert y.device.index == 1 and torch.equal(y.cpu(), x.cpu())


def test_cuda_array_interface_sources():
    _require("cupy", "torch")
    import cupy

    class Foreign:  # exposes only __cuda_array_interface__, as Numba and others do
        def __init__(self, array):
            self.__cuda_array_interface__ = array.__cuda_array_interface__
            self.keep = array

    base = cupy.arange(6, dtype=cupy.float32)
    t = interop.convert(Foreign(base), "torch")
    assert t.data_ptr() == base.data.ptr and t.cpu().tolist() == base.get().tolist()


class TestKitOnTheGpu(ConformanceSuite):
    """The conformance kit with every source on cuda:0: every pair among the frameworks that
    hold tensors there, every dtype, shape and layout, each result read back, used by the
    target's own kernels, and checked to stay on the GPU; cases run in a child process, one
    after another, so warm routes meet every other case's tensors."""

    device = "cuda:0"


def test_chained_conversions_share_one_buffer_and_every_link_computes():
    _require("torch", "jax", "cupy")
    import torch

    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    names = ("torch", "jax", "cupy", "torch", "cupy", "jax", "torch")
    chain = [x]
    for name in names[1:]:
        chain.append(interop.convert(chain[-1], name))
    want = (torch.arange(12, dtype=torch.float32) * 2).reshape(3, 4).numpy().tobytes()
    for link, name in zip(chain, names, strict=True):
        adapter = REGISTRY.get(name)
        assert adapter.data_address(link) == x.data_ptr(), f"{name} link copied"
        doubled, total = adapter.exercise(link)
        assert adapter.to_bytes(doubled) == want, f"{name}'s x + x on the shared buffer"
        assert float(total) == 66.0, f"{name}'s sum on the shared buffer"
