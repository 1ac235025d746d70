"""`device=` given the frameworks' own device objects, and checked narrowing casts (`dtypes=`).

Device objects are read by their framework's adapter (the `parse_device` hook), only for
frameworks the program imported. Results are checked through the frameworks' own APIs: where
they live, their bytes, their data addresses, and a kernel of theirs run on them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

import interop
from interop import Device
from interop.registry import REGISTRY

np = pytest.importorskip("numpy")


def _framework(name: str) -> Any:
    """The framework module when it and its adapter are usable here, else None."""
    if importlib.util.find_spec(name) is None:
        return None
    try:
        if REGISTRY.get(name).unavailable() is not None:
            return None
    except interop.InteropError:
        return None
    if name == "paddle":  # never a bare import: TensorFlow may be loaded
        import interop_paddle

        return interop_paddle.import_paddle()
    if name == "mxnet":  # with its NumPy 2 shim
        import interop_mxnet

        return interop_mxnet.import_mxnet()
    if name == "mlx":
        import mlx.core

        return mlx.core
    return importlib.import_module(name)


TARGETS = ["numpy", "torch", "jax", "tensorflow", "paddle", "mxnet", "mlx"]
FRAMEWORKS = {name: _framework(name) for name in TARGETS}


def needs(name: str) -> Any:
    module = FRAMEWORKS.get(name)
    if module is None:
        pytest.skip(f"{name} is not usable here")
    return module


# --- device objects ----------------------------------------------------------------------------
#: (id, framework, the framework's own CPU device object)
CPU_OBJECTS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("torch.device", "torch", lambda torch: torch.device("cpu")),
    ("torch.device-0", "torch", lambda torch: torch.device("cpu", 0)),
    ("jax.Device", "jax", lambda jax: jax.devices("cpu")[0]),
    ("tf-device-name", "tensorflow", lambda tf: "/device:CPU:0"),
    ("tf-short-name", "tensorflow", lambda tf: "/CPU:0"),
    ("tf-tensor-device", "tensorflow", lambda tf: tf.constant([1.0, 2.0]).device),
    ("tf.LogicalDevice", "tensorflow", lambda tf: tf.config.list_logical_devices("CPU")[0]),
    ("tf.PhysicalDevice", "tensorflow", lambda tf: tf.config.list_physical_devices("CPU")[0]),
    ("paddle.CPUPlace", "paddle", lambda paddle: paddle.CPUPlace()),
    ("paddle-tensor-place", "paddle", lambda paddle: paddle.to_tensor([1.0]).place),
    ("mxnet.cpu", "mxnet", lambda mx: mx.cpu()),
    ("mxnet-array-context", "mxnet", lambda mx: mx.nd.ones((2,)).context),
    ("mlx.cpu", "mlx", lambda mx: mx.cpu),
    ("mlx.Device", "mlx", lambda mx: mx.Device(mx.cpu)),
    ("mlx.default_device", "mlx", lambda mx: mx.default_device()),
]

#: (id, framework, a device object naming the second GPU, the Device it names)
GPU_OBJECTS: list[tuple[str, str, Callable[[Any], Any], Device]] = [
    ("torch.device", "torch", lambda torch: torch.device("cuda", 1), Device("cuda", 1)),
    ("tf-device-name", "tensorflow", lambda tf: "/device:GPU:1", Device("cuda", 1)),
    ("mxnet.gpu", "mxnet", lambda mx: mx.gpu(1), Device("cuda", 1)),
]
if sys.platform != "darwin":  # MLX's GPU is CUDA off macOS
    GPU_OBJECTS.append(
        ("mlx.Device", "mlx", lambda mx: mx.Device(mx.gpu, 1), Device("cuda", 1)),
    )


def on_cpu(name: str, y: Any) -> bool:
    """Whether result `y` of framework `name` lives on the CPU, asked of the framework."""
    if name == "torch":
        return y.device.type == "cpu"
    if name == "jax":
        return {d.platform for d in y.devices()} == {"cpu"}
    if name == "tensorflow":
        return y.device.endswith("CPU:0")
    if name == "paddle":
        return bool(y.place.is_cpu_place())
    if name == "mxnet":
        return y.context.device_type == "cpu"
    if name == "mlx":  # unified memory: MLX arrays have no device of their own
        return True
    return isinstance(y, np.ndarray)


def scalar(total: Any) -> float:
    """A framework's 0-d result as a float, read by the framework."""
    for method in ("item", "asscalar", "numpy"):
        if hasattr(total, method):
            return float(getattr(total, method)())
    return float(total)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("kind", "owner", "make"), CPU_OBJECTS, ids=[c[0] for c in CPU_OBJECTS])
def test_a_frameworks_cpu_device_object_is_read_as_the_cpu(kind, owner, make, target):
    device = make(needs(owner))
    needs(target)
    adapter = REGISTRY.get(target)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    plan = interop.explain(x, target, device=device)
    assert str(plan) == str(interop.explain(x, target, device="cpu"))
    y = interop.convert(x, target, device=device)

    assert on_cpu(target, y)
    assert adapter.to_bytes(y) == x.tobytes()
    shared = adapter.data_address(y) == x.ctypes.data
    assert shared == plan.zero_copy  # convert did what explain said
    doubled, total = adapter.exercise(y)
    assert adapter.to_bytes(doubled) == (x + x).tobytes()
    assert scalar(total) == float(x.sum())


@pytest.mark.parametrize(
    ("kind", "owner", "make", "expected"), GPU_OBJECTS, ids=[c[0] for c in GPU_OBJECTS]
)
def test_a_frameworks_gpu_device_object_names_that_gpu(kind, owner, make, expected):
    device = make(needs(owner))
    assert interop.api.HUB.device(device) == expected
    torch = needs("torch")
    if torch.cuda.device_count() > 1:
        pytest.skip("a second GPU is visible: moves onto it are test_cuda's")
    # the target is asked for the GPU read, and says it has none (or one)
    with pytest.raises(interop.DeviceError, match="cuda:1"):
        interop.explain(np.ones(3, dtype=np.float32), "torch", device=device)
    with pytest.raises(interop.DeviceError, match="cuda:1"):
        interop.convert(np.ones(3, dtype=np.float32), "torch", device=device)


def test_a_frameworks_device_object_moves_a_tensor_between_frameworks():
    torch, jax = needs("torch"), needs("jax")
    x = torch.arange(6, dtype=torch.float32)
    y = interop.convert(x, "jax", device=jax.devices("cpu")[0])
    assert y.devices() == {jax.devices("cpu")[0]}
    assert y.unsafe_buffer_pointer() == x.data_ptr()  # no move was needed: shared
    assert float((y + 1).sum()) == float((x + 1).sum())
    back = interop.convert(y, "torch", device=torch.device("cpu"))
    assert back.data_ptr() == x.data_ptr() and back.device == torch.device("cpu")


def test_torch_device_without_memory_is_refused_naming_it():
    torch = needs("torch")
    with pytest.raises(interop.DeviceError, match="meta.*names no memory DLPack can reach"):
        interop.convert(np.ones(3), "numpy", device=torch.device("meta"))


def test_an_unknown_device_object_is_refused_with_what_device_takes():
    needs("torch")

    class Somewhere:
        def __repr__(self) -> str:
            return "Somewhere()"

    with pytest.raises(interop.DeviceError) as info:
        interop.convert(np.ones(3), "numpy", device=Somewhere())
    message = str(info.value)
    assert "cannot read Somewhere()" in message
    for accepted in ("'cpu'", "'cuda:1'", "('cuda', 1)", "interop.Device", "torch.device("):
        assert accepted in message, message
    with pytest.raises(interop.DeviceError, match="cannot read Somewhere"):
        interop.explain(np.ones(3), "numpy", device=Somewhere())


def test_device_objects_never_import_a_framework():
    code = """
        import sys
        import numpy as np
        import interop
        try:
            interop.convert(np.ones(3), "numpy", device="/device:CPU:0")
        except interop.DeviceError as exc:
            print("refused:", exc)
        heavy = {"torch", "jax", "tensorflow", "paddle", "mxnet", "mlx"} & set(sys.modules)
        print("imported:", sorted(heavy))
        print(interop.convert(np.ones(3), "numpy", device=("cpu", 0)).sum())
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "refused: unknown device '/device:CPU:0'" in out.stdout
    assert "imported: []" in out.stdout
    assert out.stdout.rstrip().endswith("3.0")
