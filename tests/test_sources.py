"""Sources without DLPack: buffers, array interfaces, the CUDA array interface and Arrow.

Oracles are the producers' own APIs (`array.buffer_info`, ctypes over a bytearray or mmap,
`pyarrow.Buffer.address`, NumPy's `__array_interface__`) and the consumers' (`data_ptr()`,
`unsafe_buffer_pointer()`); every result is used by one of its framework's kernels. Memory
is proved released by the source itself: a bytearray resizes and an mmap closes again only
once no export of their buffer is left.
"""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import struct
import subprocess
import sys

import pytest

import interop
from interop import capsule as cap
from interop import sources
from interop.info import Device
from interop.registry import REGISTRY

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def address_of(buffer: bytearray | mmap.mmap) -> int:
    """Address of a writable buffer, read through ctypes, not through interop."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def floats(n: int) -> bytearray:
    return bytearray(struct.pack(f"={n}f", *range(n)))


def released(buffer: bytearray) -> bool:
    """True when nothing exports the bytearray's buffer any more (it can be resized)."""
    gc.collect()
    try:
        buffer.append(0)
    except BufferError:
        return False
    buffer.pop()
    return True


# --- the buffer protocol -----------------------------------------------------------------------
def test_bytearray_is_shared_with_torch_and_writes_reach_it():
    data = floats(6)
    view = memoryview(data).cast("f", shape=[2, 3])
    t = interop.convert(view, "torch", copy=False)
    assert t.data_ptr() == address_of(data) and t.shape == (2, 3) and t.dtype == torch.float32
    t.mul_(2)  # a torch kernel, writing through the shared memory
    assert struct.unpack("=6f", data) == (0, 2, 4, 6, 8, 10)
    with pytest.raises(BufferError):  # the export holds: the bytearray cannot move under torch
        data.append(0)
    del t, view
    assert released(data)


def test_array_array_to_numpy_and_jax_bit_exact():
    values = array.array("d", [0.5, -1.25, 3.0, 1e300])
    a = interop.convert(values, "numpy", copy=False)
    assert a.__array_interface__["data"][0] == values.buffer_info()[0]
    assert a.tobytes() == values.tobytes() and a.flags.writeable and a.sum() == sum(values)
    j = interop.convert(values, "jax")  # unaligned: JAX's importer copies, values exact
    assert np.asarray(j).tobytes() == values.tobytes()
    assert float(jnp.max(j)) == 1e300


def test_strided_memoryview_is_shared_with_torch_as_a_strided_view():
    values = array.array("i", range(10))
    view = memoryview(values)[1::3]
    t = interop.convert(view, "torch", copy=False)
    assert t.stride() == (3,) and t.data_ptr() == values.buffer_info()[0] + 4
    assert t.tolist() == [1, 4, 7] and int(t.sum()) == 12
    info = interop.inspect(view)
    assert info.strides == (3,) and info.layout == "strided" and info.dtype == "int32"


def test_reversed_memoryview_reaches_torch_as_a_copy_never_as_negative_strides():
    values = array.array("f", [1, 2, 3, 4])
    view = memoryview(values)[::-1]
    plan = interop.explain(view, "torch")
    assert not plan.zero_copy and "negative" in str(plan)
    t = interop.convert(view, "torch")
    assert t.tolist() == [4, 3, 2, 1] and float(t.cumsum(0)[-1]) == 10
    with pytest.raises(interop.CopyForbiddenError, match="negative"):
        interop.convert(view, "torch", copy=False)


def test_bytes_are_read_only_shared_with_numpy_copied_for_torch():
    payload = struct.pack("=4h", 1, -2, 3, -4)
    view = memoryview(payload).cast("h")
    assert interop.inspect(view).read_only and interop.inspect(payload).read_only
    a = interop.convert(view, "numpy", copy=False)
    assert a.__array_interface__["data"][0] == np.frombuffer(payload, np.int16).ctypes.data
    assert not a.flags.writeable and a.tolist() == [1, -2, 3, -4]
    plan = interop.explain(view, "torch")
    assert not plan.zero_copy and "read-only" in str(plan)
    t = interop.convert(view, "torch")
    t.add_(10)  # the copy is writable; the bytes object is untouched
    assert t.tolist() == [11, 8, 13, 6] and payload == struct.pack("=4h", 1, -2, 3, -4)
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(view, "torch", copy=False)


def _native_address(x: object, framework: str) -> int:
    if framework == "jax":
        return x.unsafe_buffer_pointer()
    return np.asarray(x).ctypes.data  # TensorFlow hands NumPy its own buffer


@pytest.mark.parametrize("middle", ["jax", "tensorflow"])
def test_bytes_stay_read_only_two_hops_on_after_the_first_view_dies(middle):
    # The read-only provenance lived as long as the user's memoryview: once it died, jax or
    # tensorflow -> torch gave a writable alias, and a write changed the immutable bytes.
    if middle == "tensorflow":
        pytest.importorskip("tensorflow")
    expected = struct.pack("=1024f", *range(1024))
    candidates = [bytes(bytearray(expected)) for _ in range(64)]  # one 64-byte aligned: shared
    payload = next(b for b in candidates if np.frombuffer(b, np.float32).ctypes.data % 64 == 0)
    del candidates
    where = np.frombuffer(payload, np.float32).ctypes.data
    view = memoryview(payload).cast("f")
    first = interop.convert(view, middle)
    assert _native_address(first, middle) == where  # shared, read-only
    del view
    gc.collect()
    t = interop.convert(first, "torch")
    assert t.data_ptr() != where  # a copy: torch could write the bytes through an alias
    t.add_(1)
    assert payload == expected and float(t.sum()) == sum(range(1024)) + 1024


def test_read_only_memoryview_of_a_bytearray_stays_read_only():
    data = floats(4)
    view = memoryview(data).toreadonly().cast("f")
    assert interop.inspect(view).read_only
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(view, "torch", copy=False)
    a = interop.convert(view, "numpy")
    assert a.__array_interface__["data"][0] == address_of(data) and not a.flags.writeable


def test_legacy_capsules_of_read_only_memory_are_refused_as_the_spec_asks():
    producer = sources.as_producer(b"\x00\x01\x02\x03")
    assert producer is not None
    with pytest.raises(BufferError, match="read-only"):
        producer.__dlpack__()
    capsule = producer.__dlpack__(max_version=(1, 0))
    assert cap.capsule_name(capsule) == b"dltensor_versioned"
    with pytest.raises(BufferError):
        producer.__dlpack__(max_version=(1, 0), copy=True)


def test_mmap_writable_and_read_only(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(struct.pack("=8f", *range(8)))
    with open(path, "r+b") as handle:
        shared = mmap.mmap(handle.fileno(), 0)
    t = interop.convert(memoryview(shared).cast("f"), "torch", copy=False)
    assert t.data_ptr() == address_of(shared)
    t[0] = 42  # torch writes the mapped file
    with pytest.raises(BufferError):
        shared.close()  # the export holds the mapping open while torch uses it
    del t
    gc.collect()
    shared.close()
    assert struct.unpack("=f", path.read_bytes()[:4]) == (42.0,)

    with open(path, "rb") as handle:
        read_only = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(read_only).cast("f")
    assert interop.inspect(view).read_only
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(view, "torch", copy=False)
    j = interop.convert(view, "jax", copy=False)  # page-aligned and immutable in JAX: shared
    assert j.unsafe_buffer_pointer() == interop.inspect(view).address
    assert float(jnp.sum(j)) == 42 + sum(range(1, 8))
    del j, view
    gc.collect()
    read_only.close()


def test_ctypes_arrays_and_half_floats():
    matrix = (ctypes.c_double * 3 * 2)((1, 2, 3), (4, 5, 6))
    t = interop.convert(matrix, "torch", copy=False)
    assert t.shape == (2, 3) and t.data_ptr() == ctypes.addressof(matrix)
    assert t.matmul(torch.ones(3, dtype=torch.float64)).tolist() == [6, 15]
    raw = bytearray(struct.pack("=3e", 0.5, 1.5, -2.0))
    halves = ArrayInterface({"shape": (3,), "typestr": "<f2", "data": raw, "version": 3})
    a = interop.convert(halves, "numpy")
    assert a.dtype == np.float16 and a.tolist() == [0.5, 1.5, -2.0] and float(a.sum()) == 0.0


def test_buffers_without_a_dlpack_form_get_typed_errors():
    with pytest.raises(interop.UnsupportedDTypeError, match="'u'|'w'"):
        interop.convert(array.array("u", "abc"), "numpy")
    with pytest.raises(interop.UnsupportedDTypeError, match="byte order"):
        interop.convert((ctypes.c_float.__ctype_be__ * 2)(1, 2), "numpy")
    with pytest.raises(interop.UnsupportedDTypeError, match="has no DLPack dtype"):
        sources.dtype_from_format("T{i:x:}", 4)
    released_view = memoryview(bytearray(4))
    released_view.release()
    with pytest.raises(interop.UnsupportedTensorError, match="released"):
        interop.convert(released_view, "numpy")
    closed = mmap.mmap(-1, 8)
    closed.close()
    with pytest.raises(interop.UnsupportedTensorError, match="closed"):
        interop.convert(closed, "numpy")


def test_what_a_source_cannot_export_is_refused_as_a_producer_refuses_it():
    # the array API's producers raise BufferError for what DLPack cannot carry (NumPy's own
    # __dlpack__ for datetime64, non-native byte order, strides of partial elements), so
    # `except BufferError` written for np.from_dlpack catches these sources' refusals too
    record = np.zeros(3, dtype=[("int", np.int32), ("char", np.int8)])
    partial = ArrayInterface(
        {"shape": (3,), "typestr": "<i4", "data": (record.ctypes.data, False), "strides": (5,)},
        record,
    )
    refused = {
        "a str_ scalar": np.str_("ab"),
        "a datetime64 scalar": np.datetime64("2021-05-27"),
        "a 'u' array": array.array("u", "abc"),
        "a byte-swapped buffer": (ctypes.c_float.__ctype_be__ * 2)(1, 2),
        "partial-element strides": partial,
    }
    for x in refused.values():
        for target in ("numpy", "torch"):
            with pytest.raises(BufferError):
                interop.convert(x, target)


def test_every_release_happens_once():
    strays = cap.RELEASES.stray
    data = floats(8)
    for target in ("numpy", "torch", "jax"):
        for copy in (None, True):
            if copy and target == "numpy":
                continue  # no other framework to copy through is asked for here
            result = interop.convert(memoryview(data).cast("f"), target, copy=copy)
            assert float(np.asarray(result).sum()) == sum(range(8))
            del result
    interop.explain(memoryview(data).cast("f"), "torch")
    interop.inspect(data)
    assert released(data) and cap.RELEASES.stray == strays


# --- __array_interface__ ----------------------------------------------------------------------
class ArrayInterface:
    """A producer with only `__array_interface__`, as C extensions offer."""

    def __init__(self, interface: dict, keep: object = None) -> None:
        self.__array_interface__ = interface
        self.keep = keep


def test_array_interface_pointer_with_strides_transposed_and_read_only():
    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    pointer = base.ctypes.data
    every_other = ArrayInterface(
        {"shape": (2, 3), "typestr": "<i2", "data": (pointer, False), "strides": (24, 4)}, base
    )
    t = interop.convert(every_other, "torch", copy=False)
    assert t.stride() == (12, 2) and t.data_ptr() == pointer
    assert t.tolist() == base[::2, ::2].tolist() and int(t.sum()) == base[::2, ::2].sum()

    transposed = ArrayInterface(
        {"shape": (6, 4), "typestr": "<i2", "data": (pointer, True), "strides": (2, 12)}, base
    )
    info = interop.inspect(transposed)
    assert info.read_only and info.layout == "permuted" and info.strides == (1, 6)
    a = interop.convert(transposed, "numpy", copy=False)
    assert a.__array_interface__["data"][0] == pointer and not a.flags.writeable
    assert (a == base.T).all() and (a @ np.ones(4, np.int16)).tolist() == base.sum(0).tolist()
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(transposed, "torch", copy=False)


def test_array_interface_over_a_buffer_with_offset_and_bounds():
    data = floats(8)
    inside = ArrayInterface(
        {"shape": (2, 2), "typestr": "<f4", "data": data, "offset": 8, "version": 3}
    )
    t = interop.convert(inside, "torch", copy=False)
    assert t.data_ptr() == address_of(data) + 8 and t.tolist() == [[2, 3], [4, 5]]
    outside = ArrayInterface({"shape": (3, 3), "typestr": "<f4", "data": data, "offset": 8})
    with pytest.raises(interop.UnsupportedTensorError, match="outside"):
        interop.convert(outside, "torch")
    del t, inside
    assert released(data)


def test_array_interface_refusals_are_typed():
    base = np.zeros(4, np.float32)
    cases = [
        ({"shape": (4,), "typestr": ">f4", "data": (base.ctypes.data, False)}, "byte order"),
        ({"shape": (4,), "typestr": "|O8", "data": (base.ctypes.data, False)}, "no DLPack"),
        (
            {"shape": (4,), "typestr": "<f4", "data": (base.ctypes.data, False), "mask": base},
            "mask",
        ),
        (
            {"shape": (2,), "typestr": "<f4", "data": (base.ctypes.data, 0), "strides": (6,)},
            "whole",
        ),
        ({"shape": (4,), "typestr": "<f4", "data": (0, False)}, "NULL"),
        ({"typestr": "<f4"}, "shape and typestr"),
    ]
    for interface, match in cases:
        with pytest.raises(interop.InteropError, match=match):
            interop.convert(ArrayInterface(interface, base), "numpy")


def test_array_interface_data_pointers_no_pointer_can_hold_are_refused():
    # a negative pointer was taken as is (the result segfaulted when read); 2**70 wrapped
    # round and was reported as NULL
    base = np.zeros(4, np.float32)
    for pointer in (-64, 1 << 70):
        bad = ArrayInterface({"shape": (4,), "typestr": "<f4", "data": (pointer, False)}, base)
        with pytest.raises(interop.UnsupportedTensorError, match=r"'data' pointer .*outside"):
            interop.convert(bad, "numpy")


# Malformed fields of an (array or CUDA) interface, and the field each error must name. Before,
# they raised a raw ValueError or TypeError, or (2.7, "23") were read as another shape.
MALFORMED_FIELDS = [
    ({"data": ("64", False)}, "'data' pointer"),
    ({"strides": ("4", "4")}, "'strides'"),
    ({"strides": 4}, "'strides'"),
    ({"shape": ("a", "b")}, "'shape'"),
    ({"shape": (2.7, 3)}, "'shape'"),
    ({"shape": "23"}, "'shape'"),
    ({"typestr": "<f\u0664"}, "'typestr'"),  # an Arabic-Indic four
]


def _well_formed(pointer: int) -> dict:
    return {"shape": (2, 3), "typestr": "<f4", "data": (pointer, False)}


def test_array_interface_fields_are_validated_one_by_one():
    base = np.zeros(6, np.float32)
    for fault, field in MALFORMED_FIELDS:
        bad = ArrayInterface({**_well_formed(base.ctypes.data), **fault}, base)
        with pytest.raises(interop.InteropError, match=field):
            interop.convert(bad, "numpy")
    data = floats(8)
    with pytest.raises(interop.UnsupportedTensorError, match="'offset'"):
        interop.convert(
            ArrayInterface({"shape": (2,), "typestr": "<f4", "data": data, "offset": "8"}), "numpy"
        )


def test_numpy_scalars_and_pil_images():
    t = interop.convert(np.float32(2.5), "torch")
    assert t.shape == () and t.dtype == torch.float32 and float(t * 2) == 5.0
    pil = pytest.importorskip("PIL.Image")
    image = pil.new("RGB", (4, 3), (10, 20, 30))
    plan = interop.explain(image, "torch")  # PIL hands out a bytes copy: read-only memory
    assert "read-only" in str(plan) and "__array_interface__" in plan.source
    pixels = interop.convert(image, "torch")
    assert pixels.shape == (3, 4, 3) and pixels.dtype == torch.uint8
    assert pixels.float().mean(dim=(0, 1)).tolist() == [10.0, 20.0, 30.0]
    assert interop.convert(image, "numpy").tobytes() == np.asarray(image).tobytes()


# --- __cuda_array_interface__ ---------------------------------------------------------------
class CudaInterface:
    """A producer with only `__cuda_array_interface__`, as Numba and PyCUDA arrays are."""

    def __init__(self, interface: dict, keep: object = None) -> None:
        self.__cuda_array_interface__ = {"version": 3, **interface}
        self.keep = keep


class RecordingDriver:
    """Stands in for the CUDA driver on a machine without one, recording what is asked."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, int, int]] = []

    def device_of(self, pointer: int) -> Device:
        return Device("cuda", 1)

    def wait(self, producer: int, consumer: int, pointer: int) -> None:
        self.waits.append((producer, consumer, pointer))


@pytest.fixture
def driver(monkeypatch):
    recorder = RecordingDriver()
    monkeypatch.setattr(sources, "CUDA", recorder)
    return recorder


def test_cuda_interface_is_parsed_with_strides_dtype_device_and_read_only(driver):
    obj = CudaInterface(
        {"shape": (3, 4), "typestr": "<f2", "data": (0x7F0000, True), "strides": (2, 6)}
    )
    assert REGISTRY.detect(obj) is None  # no adapter (not CuPy's): a source of its own
    info = interop.inspect(obj)
    assert (info.dtype, info.shape, info.strides) == ("float16", (3, 4), (1, 3))
    assert info.device == Device("cuda", 1) and info.read_only and info.data == 0x7F0000
    assert "__cuda_array_interface__" in info.framework
    with pytest.raises(interop.DeviceError, match="numpy cannot hold"):
        interop.convert(obj, "numpy")


def test_cuda_interface_fields_are_validated_one_by_one(driver):
    for fault, field in [*MALFORMED_FIELDS, ({"data": (-64, False)}, "'data' pointer")]:
        with pytest.raises(interop.InteropError, match=field):
            interop.inspect(CudaInterface({**_well_formed(0x7F0000), **fault}))


def test_cuda_interface_stream_is_waited_on_per_its_spec(driver):
    obj = CudaInterface({"shape": (4,), "typestr": "<f4", "data": (0x7F0000, False), "stream": 77})
    producer = sources.as_producer(obj)
    for consumer, expected in ((None, 1), (0, 1), (1, 1), (2, 2), (5, 5), (-1, None), (77, None)):
        driver.waits.clear()
        producer.__dlpack__(stream=consumer, max_version=(1, 0))
        assert driver.waits == ([] if expected is None else [(77, expected, 0x7F0000)])
    quiet = sources.as_producer(
        CudaInterface({"shape": (4,), "typestr": "<f4", "data": (0x7F0000, False), "stream": None})
    )
    driver.waits.clear()
    quiet.__dlpack__(stream=5, max_version=(1, 0))
    assert driver.waits == []  # no stream: nothing queued to wait for
    with pytest.raises(interop.UnsupportedTensorError, match="disallows"):
        interop.inspect(
            CudaInterface({"shape": (4,), "typestr": "<f4", "data": (1, False), "stream": 0})
        )


def test_cuda_interface_without_a_driver_is_on_cuda_and_waits_for_nothing():
    fresh = sources.CudaDriver()
    if fresh._driver() is not None:
        pytest.skip("a CUDA driver is present: the no-driver case does not arise")
    assert fresh.device_of(0x1000) == Device("cuda", 0)
    assert fresh.wait(7, 1, 0x1000) is None


def _cuda_torch():
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")


@pytest.mark.cuda
def test_cuda_interface_of_a_real_gpu_tensor_is_shared_and_ordered():
    _cuda_torch()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        base = torch.arange(1e6, device="cuda")
        base.mul_(2)  # queued on `side`, maybe not done yet
    interface = dict(base.__cuda_array_interface__, stream=side.cuda_stream)
    t = interop.convert(CudaInterface(interface, base), "torch", copy=False)
    assert t.data_ptr() == base.data_ptr()
    assert float(t[-1]) == 2 * (1e6 - 1)  # the default stream waited for `side`


# --- Arrow -----------------------------------------------------------------------------------
pa = pytest.importorskip("pyarrow")


def test_arrow_arrays_are_shared_read_only_and_slices_keep_their_offset():
    column = pa.array(range(10), pa.float32())  # Arrow's own, 64-byte aligned, buffer
    tail = column[3:]
    start = column.buffers()[1].address + 3 * 4
    a = interop.convert(tail, "numpy", copy=False)
    assert a.__array_interface__["data"][0] == start and not a.flags.writeable
    assert a.tolist() == list(range(3, 10)) and float(a.sum()) == 42.0
    j = interop.convert(column, "jax", copy=False)
    assert j.unsafe_buffer_pointer() == column.buffers()[1].address
    assert float(jnp.dot(j, j)) == float(sum(i * i for i in range(10)))
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(column, "torch", copy=False)
    t = interop.convert(pa.chunked_array([pa.array([5, -7], pa.int64())]), "torch")
    assert t.dtype == torch.int64 and t.tolist() == [5, -7] and int(t.abs().sum()) == 12


def test_arrow_buffers_are_shared_read_only_as_bytes():
    # pyarrow.Buffer has the buffer protocol but no __dlpack__: it was refused
    payload = bytes(range(100, 116))
    buffer = pa.py_buffer(payload)
    a = interop.convert(buffer, "numpy", copy=False)
    assert a.ctypes.data == buffer.address and not a.flags.writeable
    assert a.dtype == np.uint8 and a.tolist() == list(payload) and int(a.sum()) == sum(payload)
    mutable = pa.allocate_buffer(16)  # Arrow memory is immutable by contract: still read-only
    t = interop.convert(mutable, "torch")  # so torch, which could write, gets a copy
    assert t.data_ptr() != mutable.address and t.dtype == torch.uint8
    t = interop.convert(buffer, "torch")
    assert t.data_ptr() != buffer.address and t.tolist() == list(payload)
    t.add_(1)
    assert buffer.to_pybytes() == payload and int(t.sum()) == sum(payload) + len(payload)
    with pytest.raises(interop.CopyForbiddenError, match="read-only"):
        interop.convert(buffer, "torch", copy=False)


def test_arrow_refusals_name_the_fix():
    with pytest.raises(interop.UnsupportedTensorError, match=r"1 null.*fill_null"):
        interop.convert(pa.array([1.0, None, 3.0]), "numpy")
    with pytest.raises(interop.UnsupportedDTypeError, match="bit-packed"):
        interop.convert(pa.array([True, False]), "numpy")
    with pytest.raises(interop.UnsupportedDTypeError, match="string"):
        interop.convert(pa.array(["a"]), "numpy")
    with pytest.raises(interop.UnsupportedLayoutError, match="combine_chunks"):
        interop.convert(pa.chunked_array([pa.array([1]), pa.array([2])]), "numpy")


def test_tensorflow_takes_aligned_read_only_sources_and_computes_on_them():
    tf = pytest.importorskip("tensorflow")
    column = pa.array(range(16), pa.float32())  # Arrow's allocator aligns to 64 bytes
    assert column.buffers()[1].address % 64 == 0  # TF kernels abort on less
    t = interop.convert(column, "tensorflow", copy=False)
    assert np.asarray(tf.reshape(t, [-1])).ctypes.data == column.buffers()[1].address
    assert float(tf.reduce_sum(t * 2.0)) == 2.0 * sum(range(16))


# --- writable-only consumers, and no framework imported by recognition ---------------------
WRITABLE_ONLY = r"""
import ctypes, struct, sys
from interop_paddle import import_paddle
from interop_mxnet import import_mxnet
import interop
paddle, mx = import_paddle(), import_mxnet()
payload = struct.pack("=4f", 1, 2, 3, 4)
data = bytearray(payload)
where = ctypes.addressof(ctypes.c_char.from_buffer(data))
for name in ("paddle", "mxnet"):
    for copy in (False, None):
        try:
            result = interop.convert(memoryview(payload).cast("f"), name, copy=copy)
        except interop.CopyForbiddenError:
            print(name, "refused")
            continue
        total = result.sum()
        total = total.asscalar() if hasattr(total, "asscalar") else float(total)
        print(name, "copied", total == 10.0)
    shared = interop.convert(memoryview(data).cast("f"), name, copy=False)
    shared[0] = 9  # writes through to the bytearray
    getattr(shared, "wait_to_read", lambda: None)()  # MXNet writes asynchronously
    print(name, "shared", struct.unpack("=4f", data) == (9, 2, 3, 4))
    data[:] = payload
"""


def test_read_only_sources_reach_paddle_and_mxnet_as_copies_writable_ones_shared():
    pytest.importorskip("interop_paddle")
    pytest.importorskip("interop_mxnet")
    done = subprocess.run(
        [sys.executable, "-c", WRITABLE_ONLY], capture_output=True, text=True, timeout=300
    )
    if done.returncode and "No module named" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    for name in ("paddle", "mxnet"):
        assert f"{name} refused" in lines and f"{name} copied True" in lines
        assert f"{name} shared True" in lines


def test_recognising_a_source_imports_no_framework():
    code = (
        "import sys, array, interop\n"
        "from interop import sources\n"
        "things = [memoryview(b'ab'), array.array('f', [1]), b'x', 1, [1], 'text']\n"
        "print([sources.recognises(t) for t in things])\n"
        "print(interop.inspect(array.array('f', [1, 2])).dtype)\n"
        "print(sorted(m for m in ('numpy', 'torch', 'jax', 'tensorflow', 'pyarrow', 'cupy')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == [
        "[True, True, True, False, False, False]",
        "float32",
        "[]",
    ]


def test_copy_true_into_numpy_works_before_numpy_is_imported():
    # The planner looked for an imported framework to copy the buffer and refused ("import
    # numpy") although NumPy, the target, is imported to take the result anyway.
    code = (
        "import ctypes, sys, interop\n"
        "data = bytearray(range(8))\n"
        "before = 'numpy' in sys.modules\n"
        "a = interop.convert(data, 'numpy', copy=True)\n"
        "a[0] = 99\n"
        "where = ctypes.addressof(ctypes.c_char.from_buffer(data))\n"
        "print(before, a.ctypes.data != where, a.dtype, a.tolist(), int(a.sum()), data[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "False True uint8 [99, 1, 2, 3, 4, 5, 6, 7] 127 0"
