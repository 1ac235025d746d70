"""`device=` given the frameworks' own device objects, and checked narrowing casts (`dtypes=`).

Device objects are read by their framework's adapter (the `parse_device` hook), only for
frameworks the program imported. Results are checked through the frameworks' own APIs: where
they live, their bytes, their data addresses, and a kernel of theirs run on them.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import interop
from interop import Device
from interop.registry import REGISTRY
from interop.testing import explain_or_raise

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
        explain_or_raise(np.ones(3, dtype=np.float32), "torch", device=device)
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
    for meta in (torch.device("meta"), "meta"):
        with pytest.raises(interop.DeviceError, match="meta.*holds no data.*device='cpu'"):
            interop.convert(np.ones(3), "numpy", device=meta)


def test_every_torch_device_the_refusal_lists_is_accepted_by_that_name():
    torch = needs("torch")
    with pytest.raises(interop.DeviceError) as info:
        interop.convert(np.ones(3), "numpy", device=torch.device("hpu"))
    listed = str(info.value).rpartition("use one of ")[2].split(", ")
    assert listed == ["cpu", "cuda", "mps", "xpu"], str(info.value)
    for name in listed:  # torch's spelling, as a string or a torch.device: the same device
        assert interop.api.HUB.device(name) == interop.api.HUB.device(torch.device(name))
    assert str(interop.api.HUB.device("mps")) == "metal:0"
    assert str(interop.api.HUB.device("xpu:1")) == "oneapi:1"


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


# --- checked narrowing: dtypes= ----------------------------------------------------------------
def test_dtypes_narrows_a_tensor_whose_values_fit_and_explain_shows_the_cast():
    torch = needs("torch")
    x = torch.tensor([[1, -2, 3], [4, 2**31 - 1, -(2**31)]], dtype=torch.int64)
    plan = interop.explain(x, "numpy", dtypes={"int64": "int32"})
    text = str(plan)
    assert not plan.zero_copy and "asks for a cast, a copy" in text
    assert "cast (torch): copy into int32 with NumPy on the host" in text
    interop.api.HUB.trace = []
    try:
        y = interop.convert(x, "numpy", dtypes={"int64": "int32"})
        assert [type(s) for s in interop.api.HUB.trace] == [type(s) for s in plan.steps]
    finally:
        interop.api.HUB.trace = None
    assert y.dtype == np.int32 and y.tolist() == x.tolist()
    assert int(y.sum(dtype=np.int64)) == int(x.sum())
    assert y.ctypes.data % 64 == 0 and y.ctypes.data != x.data_ptr()
    # the source is untouched; a dtype not in the table is not cast (and still shared)
    assert x.dtype == torch.int64
    f = torch.arange(4.0)
    same = interop.convert(f, "numpy", dtypes={"int64": "int32"})
    assert same.dtype == np.float32 and same.ctypes.data == f.data_ptr()


@pytest.mark.parametrize(
    ("values", "source", "target", "index", "bad"),
    [
        ([[1, 2], [3, 2**40]], "int64", "int32", (1, 1), 2**40),
        ([0, -1], "int64", "uint32", (1,), -1),
        ([0, 2**63], "uint64", "int64", (1,), 2**63),  # a wrap-around would come back unchanged
        ([1.0, 2.5], "float64", "int32", (1,), 2.5),
        ([1.0, float("nan")], "float64", "int64", (1,), "nan"),
        ([1.5, 1e300], "float64", "float32", (1,), 1e300),
        ([2**24, 2**24 + 1], "int64", "float32", (1,), 2**24 + 1),
        ([0, 1, 2], "int8", "bool", (2,), 2),
    ],
)
def test_dtypes_refuses_the_first_value_that_does_not_fit(values, source, target, index, bad):
    x = np.array(values, dtype=source)
    with pytest.raises(interop.CastError) as info:
        interop.convert(x, "numpy", dtypes={source: target})
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert f"{source} tensor from numpy to {target}" in message
    assert f"{bad} at index {index}" in message, message


def test_dtypes_keeps_floating_rounding_and_reads_the_frameworks_dtype_spellings():
    torch = needs("torch")
    x = np.array([0.1, -2.5, 3e38], dtype=np.float64)
    y = interop.convert(x, "torch", dtypes={np.dtype("float64"): torch.float32})
    assert y.dtype == torch.float32 and y.tolist() == x.astype(np.float32).tolist()
    assert float((y * 0).sum()) == 0.0
    z = interop.convert(np.arange(3), "torch", dtypes={"torch.int64": "int16"})
    assert z.dtype == torch.int16 and (z + 1).tolist() == [1, 2, 3]
    u = interop.convert(np.arange(3), "torch", dtypes={np.int64: np.uint8})  # scalar types
    assert u.dtype == torch.uint8 and (u * 2).tolist() == [0, 2, 4]


def test_dtypes_casts_a_tensor_into_its_own_framework_too():
    torch = needs("torch")
    x = torch.tensor([7, 8], dtype=torch.int64)
    y = interop.convert(x, "torch", dtypes={"int64": "int32"})
    assert y.dtype == torch.int32 and (y * 2).tolist() == [14, 16]


def test_dtypes_copies_a_lazily_negated_torch_view_before_casting():
    torch = needs("torch")
    x = torch.arange(3, dtype=torch.float32)._neg_view()  # DLPack would lose the sign
    plan = interop.explain(x, "numpy", dtypes={"float32": "float64"})
    assert [s.action for s in plan.steps][:3] == ["export", "copy", "cast"]
    y = interop.convert(x, "numpy", dtypes={"float32": "float64"})
    assert y.dtype == np.float64 and y.tolist() == [0.0, -1.0, -2.0]


def test_dtypes_refusals_are_typed_and_say_what_to_do():
    from interop.testing import COUNTER, counting_capsule

    x = np.arange(3)
    with pytest.raises(interop.CopyForbiddenError, match="asks for a cast, which copies"):
        interop.convert(x, "numpy", dtypes={"int64": "int32"}, copy=False)
    with pytest.raises(interop.InvalidArgumentError, match="'int33' is not a dtype name"):
        interop.convert(x, "numpy", dtypes={"int64": "int33"})
    with pytest.raises(interop.InvalidArgumentError, match="must map source dtype names"):
        interop.explain(x, "numpy", dtypes=["int64", "int32"])
    with pytest.raises(interop.UnsupportedDTypeError, match="between NumPy's dtypes only"):
        interop.convert(x, "numpy", dtypes={"int64": "bfloat16"})
    capsule, token = counting_capsule(np.arange(2).tobytes(), "int64", (2,), device=("cuda", 0))
    with pytest.raises(interop.DeviceError, match="casts on the host only.*device='cpu'"):
        interop.convert(capsule, "numpy", dtypes={"int64": "int32"})
    del capsule
    gc.collect()
    assert COUNTER.released(token) == 1  # the refused capsule is freed, once


STATE_DICT_INTO_JAX_WITHOUT_X64 = """
import json
import jax, jax.numpy as jnp, numpy as np, torch
import interop

assert not jax.config.jax_enable_x64
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
)
for _ in range(2):  # training steps: running stats and num_batches_tracked move
    model(torch.randn(16, 4))
state = model.state_dict()
out = {}
try:
    interop.convert_tree(state, "jax")
except interop.InteropError as exc:
    out["plain"] = f"{type(exc).__name__}: {exc}"
plan = interop.explain_tree(state, "jax", dtypes={"int64": "int32"})
out["plan"] = {leaf.path: [leaf.status, str(leaf.plan)] for leaf in plan}
params = interop.convert_tree(state, "jax", dtypes={"int64": "int32"})
out["dtypes"] = {k: str(v.dtype) for k, v in params.items()}
out["counter"] = int(params["1.num_batches_tracked"] + 1)  # a JAX kernel on it
out["shared"] = {
    k: [v.unsafe_buffer_pointer() == state[k].data_ptr(), state[k].data_ptr() % 64 == 0]
    for k, v in params.items() if k != "1.num_batches_tracked"
}
out["values"] = all(
    np.asarray(v).tolist() == state[k].tolist() for k, v in params.items()
)
x = torch.randn(5, 4)
model.eval()
p = params
h = jnp.asarray(x.numpy()) @ p["0.weight"].T + p["0.bias"]
h = (h - p["1.running_mean"]) / jnp.sqrt(p["1.running_var"] + 1e-5) * p["1.weight"] + p["1.bias"]
h = jnp.maximum(h, 0) @ p["3.weight"].T + p["3.bias"]
out["forward"] = float(jnp.abs(h - jnp.asarray(model(x).detach().numpy())).max())
state["1.num_batches_tracked"].fill_(2**33)
try:
    interop.convert_tree(state, "jax", dtypes={"int64": "int32"})
except interop.CastError as exc:
    out["refused"] = str(exc)
    out["failures"] = [path for path, _ in exc.failures]
print(json.dumps(out))
"""


def test_a_batchnorm_state_dict_reaches_jax_without_x64_narrowed_checked():
    needs("torch"), needs("jax")
    done = subprocess.run(
        [sys.executable, "-c", STATE_DICT_INTO_JAX_WITHOUT_X64],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    counter = "['1.num_batches_tracked']"
    # without dtypes=: refused, naming the leaf and this option as the remedy
    assert out["plain"].startswith("UnsupportedDTypeError"), out["plain"]
    assert counter in out["plain"] and "dtypes={'int64': 'int32'}" in out["plain"]
    # explain_tree shows the cast, as a copy, on that leaf only
    status, text = out["plan"][counter]
    assert status == "copied" and "cast (torch): copy into int32" in text
    others = {path: s for path, (s, _) in out["plan"].items() if path != counter}
    assert set(others.values()) <= {"shared", "copied"}
    # int32 arrays with the right values; the float leaves untouched, shared where aligned
    assert out["dtypes"]["1.num_batches_tracked"] == "int32" and out["counter"] == 3
    assert {d for k, d in out["dtypes"].items() if "num_batches" not in k} == {"float32"}
    assert out["values"]
    for key, (shared, aligned) in out["shared"].items():
        assert shared == aligned, key
        assert others[f"[{key!r}]"] == ("shared" if aligned else "copied"), key
    assert any(shared for shared, _ in out["shared"].values())
    assert out["forward"] < 1e-5
    # a counter past int32 is refused, naming the leaf's path and the value
    assert out["failures"] == [counter]
    assert counter in out["refused"] and "8589934592 at index ()" in out["refused"]


README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_state_dict_example_runs_as_written_on_a_batchnorm_model():
    needs("torch"), needs("jax")
    lines = README.read_text().splitlines()
    example = next(line for line in lines if line.startswith("params = interop.convert_tree("))
    code = f"""
import jax, numpy as np, torch
import interop

assert not jax.config.jax_enable_x64  # JAX's default
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
model(torch.randn(2, 3, 8, 8))
{example}
assert type(params) is type(model.state_dict()) and list(params) == list(model.state_dict())
for key, value in params.items():
    assert isinstance(value, jax.Array), key
    assert np.asarray(value + 0).tolist() == model.state_dict()[key].tolist(), key
print(params["1.num_batches_tracked"].dtype, int(params["1.num_batches_tracked"]))
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, f"README's example:\n{example}\n{done.stderr[-3000:]}"
    assert done.stdout.split() == ["int32", "1"]


def test_dtypes_refuses_a_sharded_array_instead_of_casting_one_shard():
    needs("jax")
    code = """
import jax, jax.numpy as jnp, numpy as np
import interop
from interop.testing import explain_or_raise
mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
x = jax.device_put(jnp.arange(8, dtype=jnp.int32), spec)
for call in (interop.convert, explain_or_raise):
    try:
        call(x, "numpy", dtypes={"int32": "int16"})
    except interop.UnsupportedTensorError as exc:
        print(type(exc).__name__, exc)
print(type(interop.convert(x, "numpy")).__name__)  # without dtypes=: shard by shard
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout
    for line in lines[:2]:
        assert line.startswith("UnsupportedTensorError dtypes= casts one-buffer tensors"), line
    assert lines[2] == "LocalShards"
