"""The CuPy adapter: registers and explains itself without cupy or a GPU; converts with one.

Cases that need CuPy on a GPU skip with the adapter's own reason ("cupy is not installed",
"no CUDA device") wherever that is missing. The cross-framework CUDA matrix is in test_cuda.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import interop
from interop.registry import REGISTRY
from interop.testing import explain_or_raise

interop_cupy = pytest.importorskip("interop_cupy")
np = pytest.importorskip("numpy")

ADAPTER = REGISTRY.get("cupy")
WHY = ADAPTER.unavailable() or ADAPTER.device_unavailable(interop.Device("cuda", 0))


def needs_gpu(test):
    """A case for CuPy on a GPU: marked `cuda` (run by `pytest -m cuda`), else skipped."""
    return pytest.mark.cuda(pytest.mark.skipif(WHY is not None, reason=f"cupy: {WHY}")(test))


class CudaInterfaceOnly:
    """A producer with only `__cuda_array_interface__`, as Numba and PyCUDA arrays are."""

    def __init__(self, interface: dict, keep: object = None) -> None:
        self.__cuda_array_interface__ = interface
        self.keep = keep


# --- without a GPU (and everywhere) ----------------------------------------------------------
def test_adapter_imports_without_importing_cupy_and_is_listed_with_its_reason():
    code = (
        "import sys, interop_cupy, interop\n"
        "info = [i for i in interop.adapters() if i.name == 'cupy'][0]\n"
        "print(info.status, '|', info.unavailable, '|', 'cupy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    status, reason, imported = (part.strip() for part in done.stdout.split("|"))
    assert status == "loaded"
    assert reason == str(ADAPTER.unavailable())
    if WHY is not None:
        assert reason in ("cupy is not installed", "no CUDA device") or "CUDA" in reason
        assert imported == "False" or ADAPTER.installed()  # only a probe imports cupy


def test_interop_list_shows_why_cupy_cannot_convert():
    done = subprocess.run(
        [sys.executable, "-m", "interop", "list"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [row for row in done.stdout.splitlines() if row.startswith("cupy ")]
    if ADAPTER.unavailable():
        assert ADAPTER.unavailable() in line
    else:
        assert "loaded" in line


def test_host_tensors_are_refused_with_a_cuda_device_error():
    a = np.arange(6, dtype=np.float32)
    if not ADAPTER.installed():  # no device advice for a framework that is not there
        for x in (a, a.__dlpack__()):
            with pytest.raises(interop.FrameworkNotInstalledError, match="cupy is not installed"):
                interop.convert(x, "cupy")
        return
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.DeviceError, match="device='cuda'") as info:
            call(a, "cupy")
        assert "cupy" in str(info.value) and "cpu" in str(info.value)
    with pytest.raises(interop.DeviceError, match="cupy"):
        interop.convert(a.__dlpack__(), "cupy")


@pytest.mark.skipif(WHY is None, reason="a GPU is visible: the error case does not arise")
def test_asking_for_cuda_without_a_usable_cupy_names_the_reason():
    torch = pytest.importorskip("torch")
    # installed without a GPU: a DeviceError; not installed: FrameworkNotInstalledError
    kind = interop.DeviceError if ADAPTER.installed() else interop.FrameworkNotInstalledError
    for x in (np.ones(3, dtype=np.float32), torch.ones(3)):
        with pytest.raises(kind) as info:
            interop.convert(x, "cupy", device="cuda")
        assert WHY in str(info.value) and "cupy" in str(info.value)


def test_cuda_array_interface_producers_are_sources_not_cupy_arrays():
    producer = CudaInterfaceOnly(
        {"shape": (0,), "typestr": "<f4", "data": (0, False), "version": 3, "strides": None}
    )
    assert REGISTRY.detect(producer) is None  # interop.sources takes them, CuPy or not
    assert REGISTRY.detect(np.ones(2)) is not ADAPTER
    assert "__cuda_array_interface__" in interop.inspect(producer).framework


def test_capabilities_declare_the_gaps():
    caps = ADAPTER.capabilities()
    assert "float8_e4m3fn" not in caps.import_dtypes
    assert "bfloat16" not in interop_cupy._caps_for("13.6.0").import_dtypes
    assert "bfloat16" in interop_cupy._caps_for("14.2.0").import_dtypes
    assert "bfloat16" not in interop_cupy._caps_for(None).import_dtypes
    assert {"cuda", "cuda_managed"} <= caps.devices
    assert "negative" not in caps.import_layouts
    assert ADAPTER.device_unavailable(interop.Device("cpu")) is not None


class _UnsignedStrides:
    """A NumPy array exporting as CuPy 14.2 does: its negative strides divided by the item
    size as unsigned numbers (int16 `a[::-1]` gives 2**63 - 1), as measured on a GPU."""

    def __init__(self, array):
        self.array, self.itemsize = array, array.itemsize
        self.strides, self.ndim = array.strides, array.ndim

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        from interop import capsule as cap

        capsule = self.array.__dlpack__(**kwargs)
        tensor = cap.managed(*cap.pointer(capsule)).dl_tensor
        for i, stride in enumerate(self.array.strides):
            tensor.strides[i] = (stride % (1 << 64)) // self.itemsize
        return capsule


def test_strides_beyond_any_memory_are_a_typed_error_not_an_import():
    rows = np.arange(12, dtype=np.int16).reshape(3, 4)[::-1]
    broken = _UnsignedStrides(rows)
    with pytest.raises(interop.DLPackError, match=r"strides \[9223372036854775804, 1\]"):
        interop.inspect(broken)
    with pytest.raises(interop.DLPackError, match="beyond any memory"):
        interop.convert(broken, "numpy")


def test_cupys_negative_strides_are_rewritten_true_in_its_capsules():
    rows = np.arange(12, dtype=np.int16).reshape(3, 4)[::-1]
    fixed = interop_cupy._TrueStrides(_UnsignedStrides(rows))
    info = interop.inspect(fixed)
    assert info.strides == (-4, 1) and info.layout == "negative"
    back = np.from_dlpack(fixed)  # NumPy reads through the rewritten strides
    assert back.tolist() == [[8, 9, 10, 11], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert back.ctypes.data == rows.ctypes.data and int((back * 2).sum()) == 132
    assert ADAPTER.export(np.arange(4, dtype=np.int8)[::-1]).__class__ is np.ndarray  # 1 byte


# --- with CuPy on a GPU ----------------------------------------------------------------------
@needs_gpu
def test_host_round_trip_through_device_moves():
    import cupy

    x = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    plan = interop.explain(x, "numpy", device="cpu")
    assert not plan.zero_copy and "cpu" in str(plan)
    a = interop.convert(x, "numpy", device="cpu")
    assert isinstance(a, np.ndarray) and a.tobytes() == cupy.asnumpy(x).tobytes()
    with pytest.raises(interop.DeviceError, match="numpy cannot hold"):
        interop.convert(x, "numpy")
    with pytest.raises(interop.CopyForbiddenError):
        interop.convert(x, "numpy", device="cpu", copy=False)


@needs_gpu
def test_torch_cuda_both_ways_zero_copy_with_layouts():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch build sees no CUDA device")
    import cupy

    base = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    for x in (base, base.T, base[:, ::2]):
        t = interop.convert(x, "torch", copy=False)
        assert t.data_ptr() == x.data.ptr and t.cpu().tolist() == cupy.asnumpy(x).tolist()
    reversed_rows = base[::-1]  # negative strides: torch would abort, so CuPy copies first
    t = interop.convert(reversed_rows, "torch")
    assert t.cpu().tolist() == cupy.asnumpy(reversed_rows).tolist()
    back = interop.convert(torch.arange(6, device="cuda").reshape(2, 3).T, "cupy")
    assert isinstance(back, cupy.ndarray) and back.tolist() == [[0, 3], [1, 4], [2, 5]]
    host = interop.convert(torch.arange(4.0), "cupy", device="cuda:0")  # torch moves it
    assert isinstance(host, cupy.ndarray) and host.tolist() == [0.0, 1.0, 2.0, 3.0]
    halves = torch.tensor([1.0, -2.5], dtype=torch.bfloat16, device="cuda")
    if "bfloat16" in ADAPTER.capabilities().import_dtypes:  # CuPy 14 and later
        got = interop.convert(halves, "cupy")
        assert got.data.ptr == halves.data_ptr()
        assert got.view(cupy.uint16).tolist() == halves.view(torch.uint16).cpu().tolist()
    else:
        with pytest.raises(interop.UnsupportedDTypeError, match="bfloat16"):
            interop.convert(halves, "cupy")


@needs_gpu
def test_consumer_stream_is_cupys_current_stream():
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        assert ADAPTER.consumer_stream(interop.Device("cuda", 0)) == stream.ptr
    assert ADAPTER.consumer_stream(interop.Device("cpu")) is None


@needs_gpu
def test_cuda_array_interface_source_to_the_host():
    import cupy

    base = cupy.arange(5, dtype=cupy.int32)
    source = CudaInterfaceOnly(base.__cuda_array_interface__, keep=base)
    on_gpu = interop.convert(source, "cupy", copy=False)  # shared, no CuPy wrapping needed
    assert on_gpu.data.ptr == base.data.ptr
    a = interop.convert(on_gpu, "numpy", device="cpu")  # CuPy moves its own arrays
    assert a.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(interop.DeviceError, match="numpy"):  # no framework owns the source
        interop.convert(source, "numpy", device="cpu")
