"""NumPy <-> PyTorch specifics the issue names, beyond the conformance kit."""

import gc
import subprocess
import sys

import pytest

import interop

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
#: NumPy 2.1 brought versioned capsules; before it, every array NumPy imports is read-only
NUMPY_VERSIONED = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 1)
needs_versioned_numpy = pytest.mark.skipif(
    not NUMPY_VERSIONED, reason=f"NumPy {np.__version__} has no versioned capsules (2.1+)"
)


def addr(t):
    return t.data_ptr() if isinstance(t, torch.Tensor) else t.__array_interface__["data"][0]


def test_same_framework_returns_itself_or_a_copy():
    a = np.arange(6.0)
    assert interop.convert(a, "numpy") is a
    assert interop.convert(a, np, copy=False) is a
    fresh = interop.convert(a, "np", copy=True)
    assert fresh is not a and addr(fresh) != addr(a) and (fresh == a).all()
    plan = interop.explain(a, "numpy", copy=True)
    assert not plan.zero_copy and "fresh" in str(plan)


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "quantized"])
def test_torch_tensors_dlpack_cannot_carry_are_copied_as_themselves(layout):
    # same framework, copy=True: what explain promises (a fresh copy), not a refusal
    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    x = {
        "sparse_coo": lambda: dense.to_sparse(),
        "sparse_csr": lambda: dense.to_sparse_csr(),
        "quantized": lambda: torch.quantize_per_tensor(dense, 0.5, 0, torch.qint8),
    }[layout]()
    assert not interop.explain(x, "torch", copy=True).zero_copy
    y = interop.convert(x, "torch", copy=True)
    assert y is not x and y.layout == x.layout and y.dtype == x.dtype
    values = (lambda t: t.dequantize()) if layout == "quantized" else (lambda t: t.to_dense())
    assert torch.equal(values(y), values(x))
    assert interop.convert(x, "torch") is x


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "meta", "quantized"])
def test_torch_tensors_without_a_dlpack_form_are_refused_as_torch_refuses_them(kind):
    # torch's own export raises BufferError for each (np.from_dlpack(x) does): so do we
    x = {
        "sparse_coo": lambda: torch.ones(2, 2).to_sparse(),
        "sparse_csr": lambda: torch.ones(2, 2).to_sparse_csr(),
        "meta": lambda: torch.empty(3, device="meta"),
        "quantized": lambda: torch.quantize_per_tensor(torch.ones(2), 0.5, 0, torch.qint8),
    }[kind]()
    with pytest.raises(BufferError):
        np.from_dlpack(x)
    for target in ("numpy", "jax"):
        with pytest.raises(interop.UnsupportedTensorError) as refused:
            interop.convert(x, target)
        assert isinstance(refused.value, BufferError), type(refused.value).__mro__


def test_read_only_numpy_into_torch_is_copied_or_refused():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a.flags.writeable = False
    plan = interop.explain(a, "torch")
    assert not plan.zero_copy and "read-only" in str(plan)
    t = interop.convert(a, "torch")
    assert addr(t) != addr(a) and t.numpy().tobytes() == a.tobytes()
    t[0, 0] = 100  # writing the copy leaves the read-only source alone
    assert a[0, 0] == 0
    with pytest.raises(interop.CopyForbiddenError, match="read-only") as info:
        interop.convert(a, "torch", copy=False)
    assert isinstance(info.value, BufferError)
    assert "numpy" in str(info.value) and "torch" in str(info.value)


@needs_versioned_numpy
def test_read_only_numpy_stays_read_only_through_a_capsule_into_numpy():
    a = np.arange(4.0)
    a.flags.writeable = False
    back = interop.convert(a.__dlpack__(max_version=(1, 0)), "numpy")
    assert addr(back) == addr(a) and not back.flags.writeable


def test_negative_strides_into_torch_are_copied_never_handed_over():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[::-1]
    plan = interop.explain(a, "torch")
    assert plan.copy_at == "source" and "negative" in str(plan)
    t = interop.convert(a, "torch")
    assert t.tolist() == a.tolist()
    with pytest.raises(interop.CopyForbiddenError, match="negative"):
        interop.convert(a, "torch", copy=False)
    # a capsule with negative strides, no adapter to copy it at the source: via NumPy
    t2 = interop.convert(a.__dlpack__(), "torch")
    assert t2.tolist() == a.tolist()


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_a_tensor_requiring_grad_is_refused_as_torch_refuses_it(target):
    if target == "jax":
        pytest.importorskip("jax")
    plain = torch.arange(12.0).reshape(3, 4)
    for _ in range(3):  # a route learned for float32 tensors: warm calls must refuse too
        interop.convert(plain, target)
    assert "takes the route remembered" in str(interop.explain(plain, target))
    t = torch.arange(12.0).reshape(3, 4).requires_grad_(True)
    with pytest.raises(RuntimeError) as own:  # what torch itself raises exporting it
        t.numpy()
    for _ in range(2):  # the full path, then whatever a route would take
        with pytest.raises(interop.UnsupportedTensorError) as refused:
            interop.convert(t, target)
        assert isinstance(refused.value, type(own.value))
        assert isinstance(refused.value, BufferError)  # as its __dlpack__ raises
        assert "x.detach()" in str(refused.value) and "interop.wrap(" in str(refused.value)
    plan = interop.explain(t, target)  # explained, not raised
    assert type(plan.error) is type(refused.value) and not plan.zero_copy
    assert "refused" in str(plan) and "x.detach()" in str(plan), plan
    # the ways out: its values, shared; torch itself returns the tensor as is
    a = interop.convert(t.detach(), "numpy")
    assert addr(a) == t.data_ptr() and a.sum() == 66.0
    assert interop.convert(t, "torch") is t and t.grad is None
    with pytest.raises(RuntimeError, match=r"\['w'\].*x\.detach\(\)"):
        interop.convert_tree({"w": t, "b": plain}, target)
    tree = interop.explain_tree({"w": t, "b": plain}, target)
    assert [leaf.path for leaf in tree.refused] == ["['w']"] and "x.detach()" in str(tree)
    # a model's state_dict() holds detached tensors: it converts; its parameters() do not
    model = torch.nn.Linear(3, 2)
    assert len(interop.convert_tree(model.state_dict(), target)) == 2
    with pytest.raises(interop.UnsupportedTensorError, match=r"(?s)\[0\].*\[1\]"):
        interop.convert_tree(list(model.parameters()), target)


@needs_versioned_numpy
def test_torch_to_numpy_is_a_writable_alias():
    t = torch.zeros(3, 4)
    a = interop.convert(t, "numpy")
    a[1, 2] = 7
    assert t[1, 2].item() == 7


def test_bfloat16_reaches_numpy_through_ml_dtypes_zero_copy():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = torch.linspace(-2, 2, 8, dtype=torch.bfloat16)
    a = interop.convert(t, "numpy")
    assert a.dtype == ml_dtypes.bfloat16 and addr(a) == t.data_ptr()
    back = interop.convert(a, "torch")
    # before NumPy 2.1 `a` is read-only (a legacy import), so torch must get a copy
    assert back.dtype == torch.bfloat16 and (back.data_ptr() == t.data_ptr()) == NUMPY_VERSIONED
    assert torch.equal(back, t)


def test_bfloat16_without_ml_dtypes_is_a_clear_error(monkeypatch):
    import interop_numpy

    monkeypatch.setattr(interop_numpy, "_has_ml_dtypes", lambda: False)
    interop.api.HUB.plans.clear()
    try:
        with pytest.raises(interop.UnsupportedDTypeError, match="install ml_dtypes"):
            interop.convert(torch.ones(2, dtype=torch.bfloat16), "numpy")
    finally:
        interop.api.HUB.plans.clear()


def test_zero_d_and_zero_size():
    s = torch.tensor(3.5)
    a = interop.convert(s, "numpy")
    assert a.shape == () and a == 3.5 and addr(a) == s.data_ptr()
    e = np.zeros((0, 4), dtype=np.float64)
    t = interop.convert(e, "torch")
    assert tuple(t.shape) == (0, 4) and t.dtype == torch.float64


def test_module_objects_and_aliases_name_targets():
    a = np.ones(3, dtype=np.float32)
    assert isinstance(interop.convert(a, torch), torch.Tensor)
    assert isinstance(interop.convert(a, "pytorch"), torch.Tensor)


def test_unknown_targets_and_sources_are_typed_errors():
    with pytest.raises(interop.UnknownFrameworkError, match="no adapter for framework 'nope'"):
        interop.convert(np.ones(2), "nope")
    with pytest.raises(interop.UnsupportedTensorError, match="list"):
        interop.convert([1, 2], "torch")
    with pytest.raises(interop.UnsupportedTensorError, match="builtins.object"):
        interop.convert(object(), "torch")
    # NumPy scalars have no __dlpack__ but an __array_interface__: 0-d tensors (interop.sources)
    assert interop.convert(np.float64(1.5), "torch").item() == 1.5


def test_inspect_reports_the_view_in_elements():
    base = np.zeros((4, 6), dtype=np.int16)
    view = base[1:, ::2].T
    info = interop.inspect(view)
    assert info.shape == (3, 3) and info.strides == (2, 6)
    assert info.dtype == "int16" and str(info.device) == "cpu" and info.framework == "numpy"
    assert info.address == addr(view) and info.layout == "strided"
    assert info.version == ((1, 0) if NUMPY_VERSIONED else None) and not info.read_only
    t = torch.ones(2, 3, dtype=torch.complex64)
    ti = interop.inspect(t)
    assert ti.dtype == "complex64" and ti.address == t.data_ptr() and ti.version == (1, 3)


def test_inspect_leaves_a_capsule_usable():
    a = np.arange(5.0)
    capsule = a.__dlpack__()
    assert interop.inspect(capsule).shape == (5,)
    assert addr(interop.convert(capsule, "torch")) == addr(a)


def test_a_dlpack_producer_without_an_adapter_converts():
    class Producer:  # any object speaking DLPack, from a framework with no adapter
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    a = np.arange(6, dtype=np.float32)
    t = interop.convert(Producer(a), "torch")
    assert t.data_ptr() == addr(a)
    assert "Producer" in interop.explain(Producer(a), "torch").source


def test_device_moves_are_explained_copies_or_clear_errors():
    a = np.ones(3, dtype=np.float32)
    assert interop.explain(a, "torch", device="cpu").zero_copy
    if not torch.cuda.is_available():
        with pytest.raises(interop.DeviceError, match="torch cannot hold .* cuda:0: this torch"):
            interop.convert(a, "torch", device="cuda:0")
    with pytest.raises(interop.DeviceError, match="unknown device"):
        interop.convert(a, "torch", device="quantum")
    with pytest.raises(interop.DeviceError, match="numpy cannot hold"):
        interop.convert(torch.ones(2), "numpy", device="cuda")


def test_a_failing_import_releases_the_capsule_once():
    from interop.testing import COUNTER, counting_capsule

    class Failing(interop.Adapter):  # a real plugin whose importer fails after the plan
        name = "failing"
        modules = ("failing_fw",)
        contract = (1, 0)

        def unavailable(self):
            return None  # a stand-in framework: nothing to install

        def capabilities(self):
            return interop.Capabilities(
                export_dtypes=frozenset({"float32"}),
                import_dtypes=frozenset({"float32"}),
                imports=frozenset({"capsule_versioned"}),
            )

        def from_dlpack(self, source):
            raise RuntimeError("importer failed half way")

    interop.register(Failing(), replace=True)
    capsule, token = counting_capsule(bytes(16), "float32", (4,))
    with pytest.raises(interop.InteropError, match="RuntimeError: importer failed half way"):
        interop.convert(capsule, "failing")
    del capsule
    gc.collect()
    assert COUNTER.released(token) == 1


def test_no_framework_is_imported_to_detect_a_source():
    code = (
        "import sys, numpy, interop; interop.convert(numpy.ones(2), 'numpy'); "
        "interop.inspect(numpy.ones(2)); "
        "print(sorted(m for m in ('torch', 'jax', 'tensorflow', 'mxnet', 'paddle', 'cupy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("dtype", ["U3", "O", "M8[D]", [("a", "i4")]])
def test_numpy_dtypes_dlpack_cannot_carry_are_typed_errors(dtype):
    x = np.zeros(3, dtype=dtype)
    with pytest.raises(interop.UnsupportedDTypeError, match="numpy cannot export"):
        interop.convert(x, "torch")


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "complex64"])
def test_unpickled_arrays_are_shared_and_copied_like_any_other(dtype):
    # an unpickled dtype is not NumPy's singleton (isbuiltin == 0): every array that came from
    # another process (multiprocessing, Ray's object store) has one
    import pickle

    from interop.registry import REGISTRY

    a = pickle.loads(pickle.dumps(np.arange(6).astype(dtype).reshape(2, 3), protocol=5))
    assert a.dtype.isbuiltin == 0
    t = interop.convert(a, "torch")
    assert addr(t) == addr(a) and t.tolist() == a.tolist()
    fresh = REGISTRY.get("numpy").copy(a)
    assert fresh.__array_interface__["data"][0] % 64 == 0 and fresh.tobytes() == a.tobytes()
    swapped = pickle.loads(pickle.dumps(np.arange(3, dtype=">f4"), protocol=5))
    with pytest.raises(interop.UnsupportedDTypeError, match="byte order"):
        interop.convert(swapped, "torch", copy=False)


def test_numpy_copies_are_aligned_for_importers_that_share_only_aligned_buffers():
    from interop.registry import REGISTRY

    view = np.arange(40, dtype=np.float32).reshape(4, 10)[1:, ::3]
    fresh = REGISTRY.get("numpy").copy(view)
    assert fresh.__array_interface__["data"][0] % 64 == 0
    assert fresh.flags.c_contiguous and fresh.flags.writeable
    assert fresh.tobytes() == view.tobytes()


def test_a_producer_refusing_its_own_export_is_a_typed_error_naming_it():
    class Refuses:
        def __dlpack__(self, **kwargs):
            raise RuntimeError("export unsupported for this layout")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(interop.UnsupportedTensorError, match="could not export .* layout"):
        interop.convert(Refuses(), "torch")


def test_inspect_names_a_producer_refusing_its_export_too():
    class Refuses:
        def __dlpack__(self, **kwargs):
            raise RuntimeError("export unsupported for this layout")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(interop.UnsupportedTensorError, match="Refuses could not export"):
        interop.inspect(Refuses())


def _writable_import(plan):
    """The plan's import step, checked to be the only way it makes the result writable."""
    (step,) = [s for s in plan.steps if type(s).__name__ == "Import"]
    assert not any(type(s).__name__ == "Bridge" for s in plan.steps), plan
    return step.writable


@needs_versioned_numpy
@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_legacy_capsules_reach_numpy_writable_without_a_bridge_released_once(compiled):
    # NumPy marks arrays taken from legacy capsules read-only; memory that may be written is
    # made writable on arrival (no bridge into a versioned capsule) and released exactly once
    from interop.api import HUB, make_convert
    from interop.capsule import live_bridges
    from interop.engine import Hub
    from interop.testing import COUNTER, counting_capsule

    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    convert = make_convert(Hub(HUB.registry, compiled=compiled))
    bridges = live_bridges()
    payload = np.arange(6, dtype=np.float32).tobytes()
    capsule, token = counting_capsule(payload, "float32", (2, 3), versioned=False)
    plan = interop.explain(capsule, "numpy")
    assert plan.zero_copy and _writable_import(plan), plan
    assert "make the result writable" in str(plan)
    a = convert(capsule, "numpy")
    assert a.flags.writeable and a.tolist() == [[0, 1, 2], [3, 4, 5]]
    doubled = a + a  # NumPy's own kernels on the result, then a write through it
    a[1, 2] = 50
    assert doubled[1, 2] == 10 and a.sum() == 60 and a[1, 2] == 50
    del capsule, a, doubled
    gc.collect()
    assert COUNTER.released(token) == 1 and live_bridges() == bridges


@needs_versioned_numpy
def test_torch_legacy_capsule_into_numpy_is_a_writable_alias_torch_sees():
    t = torch.arange(4, dtype=torch.float64)
    a = interop.convert(torch.utils.dlpack.to_dlpack(t), "numpy")
    assert a.flags.writeable and addr(a) == addr(t)
    a[2] = -1.0
    assert t.tolist() == [0.0, 1.0, -1.0, 3.0] and float((t * 2).sum()) == 6.0


def test_read_only_legacy_sources_stay_read_only_in_numpy():
    jnp = pytest.importorskip("jax.numpy")
    j = jnp.arange(4.0)
    plan = interop.explain(j, "numpy")
    assert plan.zero_copy and not _writable_import(plan)
    a = interop.convert(j, "numpy")
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0


@needs_versioned_numpy
def test_numpy_bridges_legacy_capsules_where_its_flags_field_cannot_be_trusted(monkeypatch):
    import interop_numpy

    from interop.engine import Hub

    # the probe refuses an offset that is not the flags' (here the refcount's): NumPy's
    # struct must be checked against what NumPy says before anything is written into it
    monkeypatch.setattr(interop_numpy, "_FLAGS_OFFSET", 0)
    assert not interop_numpy._flag_field_works.__wrapped__()
    monkeypatch.undo()
    assert interop_numpy._flag_field_works()
    # without a trusted field, the plan bridges into a versioned capsule as before
    monkeypatch.setattr(interop_numpy, "_flag_field_works", lambda: False)
    hub = Hub(interop.api.HUB.registry)
    t = torch.arange(3.0)
    plan = hub.explain(torch.utils.dlpack.to_dlpack(t), "numpy")
    assert any(type(s).__name__ == "Bridge" for s in plan.steps), plan
    assert not any(getattr(s, "writable", False) for s in plan.steps), plan
    a = hub.convert(torch.utils.dlpack.to_dlpack(t), "numpy")
    a[0] = 9.0
    assert a.flags.writeable and t[0].item() == 9.0


def test_numpy_makes_float64_samples_and_the_kit_checks_numpy_float64_pairs():
    from interop.registry import REGISTRY
    from interop.testing.suite import check_pair

    numpy = REGISTRY.get("numpy")
    x = numpy.sample("float64", (2, 3))
    assert x.dtype == np.float64
    assert x.tolist() == [[-13.625, -9.0, -4.375], [0.25, 4.875, 9.5]]  # ((i*37+11)%251-120)/8
    got = check_pair(numpy, REGISTRY.get("torch"), "float64", (2, 3), "contiguous")
    assert got == "zero-copy, write seen"


def test_the_kit_fails_where_a_source_cannot_make_a_dtype_it_declares(monkeypatch):
    from interop.registry import REGISTRY
    from interop.testing.suite import check_pair

    numpy = REGISTRY.get("numpy")

    def broken(dtype, shape):
        raise AttributeError("no such dtype")

    monkeypatch.setattr(numpy, "sample", broken)
    with pytest.raises(AssertionError, match="numpy declares float64 but its sample"):
        check_pair(numpy, REGISTRY.get("torch"), "float64", (3,), "contiguous")


def test_a_masked_array_copied_into_numpy_keeps_its_mask():
    x = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    y = interop.convert(x, "numpy", copy=True)
    assert isinstance(y, np.ma.MaskedArray)
    assert y.mask.tolist() == [False, True, False, False]
    assert y.data.tolist() == [0.0, 1.0, 2.0, 3.0] and float(y.sum()) == 5.0  # 1.0 masked
    assert y.ctypes.data != x.ctypes.data  # fresh memory
    y[0] = 9.0
    assert x[0] == 0.0


def test_copy_forbidden_for_a_reversed_view_says_why_and_what_to_do():
    x = np.arange(6.0)[::-1]
    with pytest.raises(interop.CopyForbiddenError) as err:
        interop.convert(x, "torch", copy=False)
    text = str(err.value)
    assert "this tensor is negative (a reversed view: some strides are negative)" in text
    assert "Drop copy=False" in text and "x.copy() or x.contiguous()" in text
    y = interop.convert(x.copy(), "torch", copy=False)  # what it says to do works
    assert y.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0] and float((y + 1).sum()) == 21.0
