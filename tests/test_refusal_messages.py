"""Every refusal a user meets says what to do next, in the user's terms: one table of inputs,
the error each must raise (our class and the builtin ones the frameworks' own calls raise)
and the remedy its message must name."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import interop


def _np() -> Any:
    import numpy as np

    return np


def _torch() -> Any:
    import torch

    return torch


def _without_x64(call: Callable[[], Any]) -> Any:
    import jax

    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", False)
    try:
        return call()
    finally:
        jax.config.update("jax_enable_x64", was)


def _into_jax_without_x64(x: Any) -> Any:
    return _without_x64(lambda: interop.convert(x, "jax"))


def _wrapped_jax_indexing_with_torch_int64() -> Any:
    """torch's default integer dtype into a JAX function, as an embedding lookup does."""
    torch = _torch()
    lookup = interop.wrap(lambda ids, table: table[ids], "jax", "torch")
    return _without_x64(lambda: lookup(torch.tensor([0, 2]), torch.ones(4, requires_grad=True)))


def _wrapped_torch_returning_int64_into_jax() -> Any:
    import jax.numpy as jnp

    argmax = interop.wrap(lambda x: x.argmax(), "torch", "jax")
    return _without_x64(lambda: argmax(jnp.ones(3)))


def _nested_torch_tensor() -> Any:
    torch = _torch()
    with warnings.catch_warnings():  # (its prototype warning)
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])


def _freed_torch_tensor() -> Any:
    t = _torch().ones(4)
    t.untyped_storage().resize_(0)  # what FSDP does to a sharded parameter
    return t


# name: (frameworks needed, the call, error classes, words of the remedy)
CASES: dict[str, tuple[tuple[str, ...], Callable[[], Any], tuple[type, ...], tuple[str, ...]]] = {
    "x64 off narrows": (
        ("torch", "jax"),
        lambda: _into_jax_without_x64(_torch().ones(2, dtype=_torch().float64)),
        (interop.UnsupportedDTypeError,),
        ("jax_enable_x64", "dtypes={'float64': 'float32'}"),
    ),
    "a wrapped JAX function given torch's int64": (
        ("torch", "jax"),
        _wrapped_jax_indexing_with_torch_int64,
        (interop.UnsupportedDTypeError, TypeError),
        ("argument leaf 0", "jax_enable_x64", "interop.convert(x, 'torch', dtypes="),
    ),
    "a wrapped torch function returning int64 into JAX": (
        ("torch", "jax"),
        _wrapped_torch_returning_int64_into_jax,
        (interop.UnsupportedDTypeError, TypeError),
        ("output leaf 0", "jax_enable_x64", "interop.convert(y, 'torch', dtypes="),
    ),
    "copy=False where a copy is needed": (
        ("tensorflow",),
        lambda: interop.convert(_np().ones((4, 4), "f4")[:, ::2], "tensorflow", copy=False),
        (interop.CopyForbiddenError, BufferError, ValueError),
        ("Drop copy=False", "x.copy()"),
    ),
    "unknown framework": (
        (),
        lambda: interop.convert(_np().ones(2), "pytorchh"),
        (interop.UnknownFrameworkError, LookupError),
        ("known adapters:", "torch", "Install its interop-<framework>"),
    ),
    "a device the target does not hold": (
        ("torch",),
        lambda: interop.convert(_torch().ones(2), "numpy", device="cuda:0"),
        (interop.DeviceError, ValueError),
        ("supports cpu", "leave device= out"),
    ),
    "a dtype the target does not hold, castable": (
        ("mxnet",),
        lambda: interop.convert(_np().ones(2, "i2"), "mxnet"),
        (interop.UnsupportedDTypeError, TypeError),
        ("it imports", "dtypes={'int16': 'int32'}"),
    ),
    "a dtype the target does not hold, not castable by interop": (
        ("torch", "mxnet"),
        lambda: interop.convert(_torch().ones(2, dtype=_torch().bfloat16), "mxnet"),
        (interop.UnsupportedDTypeError, TypeError),
        ("cast it to one of those first", "source framework's own call"),
    ),
    "a dtype the target would narrow": (
        ("mlx",),
        lambda: interop.convert(_np().ones(2, "c16"), "mlx"),
        (interop.UnsupportedDTypeError,),
        ("dtypes={'complex128': 'complex64'}",),
    ),
    "a list of numbers": (
        (),
        lambda: interop.convert([1, 2], "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("numpy.asarray(x)",),
    ),
    "a structure of tensors": (
        (),
        lambda: interop.convert({"w": _np().ones(2)}, "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("interop.convert_tree(x, to)",),
    ),
    "a TensorFlow string tensor": (
        ("tensorflow",),
        lambda: interop.convert(__import__("tensorflow").constant(["a"]), "numpy"),
        (interop.UnsupportedDTypeError, TypeError),
        ("x.numpy()",),
    ),
    "a misspelt immutable policy": (
        (),
        lambda: interop.set_immutable_policy("copyy"),
        (interop.InvalidArgumentError,),
        ("'share' or 'copy'",),
    ),
    "a misspelt dtype in dtypes=": (
        ("torch",),
        lambda: interop.convert(_np().ones(2, "i8"), "torch", dtypes={"int64": "int33"}),
        (interop.InvalidArgumentError,),
        ("known:", "int32"),
    ),
    "a value a checked cast cannot hold": (
        ("torch",),
        lambda: interop.convert(_np().array([2**33]), "torch", dtypes={"int64": "int32"}),
        (interop.CastError, ValueError),
        ("8589934592", "leave int64 out of dtypes=", "wider dtype"),
    ),
    "a framework that is not installed": (
        (),
        lambda: interop.convert(_np().ones(2), "cupy"),
        (interop.FrameworkNotInstalledError, ImportError),
        ("pip install cupy-cuda12x",),
    ),
    "freed storage": (
        ("torch",),
        lambda: interop.convert(_freed_torch_tensor(), "numpy"),
        (interop.DLPackError,),
        ("freed", "convert it while its memory is allocated"),
    ),
    "a 0-d tensor into MXNet": (
        ("mxnet",),
        lambda: interop.convert(_np().ones(()), "mxnet"),
        (interop.UnsupportedLayoutError, ValueError),
        ("x.reshape(1)", "mx.npx.set_np()"),
    ),
    "too many dimensions for Paddle": (
        ("paddle",),
        lambda: interop.convert(_np().ones((1,) * 10), "paddle"),
        (interop.UnsupportedLayoutError, ValueError),
        ("at most 9", "reshape it"),
    ),
    "NumPy datetime64": (
        ("torch",),
        lambda: interop.convert(_np().array(["2020-01-01"], "datetime64[D]"), "torch"),
        (interop.UnsupportedDTypeError, BufferError),
        ("x.view('int64')",),
    ),
    "NumPy byte-swapped": (
        ("torch",),
        lambda: interop.convert(_np().ones(2, ">f4"), "torch"),
        (interop.UnsupportedDTypeError, BufferError),
        ("newbyteorder('=')",),
    ),
    "a quantized torch tensor": (
        ("torch",),
        lambda: interop.convert(
            _torch().quantize_per_tensor(_torch().ones(2), 0.1, 0, _torch().qint8), "numpy"
        ),
        (interop.UnsupportedTensorError, BufferError),
        ("x.dequantize()", "x.int_repr()"),
    ),
    "a lazily conjugated torch tensor": (
        ("torch",),
        lambda: interop.convert(_torch().ones(2, dtype=_torch().complex64).conj(), "numpy"),
        (interop.UnsupportedTensorError, BufferError),
        ("x.resolve_conj()",),
    ),
    "a sparse torch tensor": (
        ("torch",),
        lambda: interop.convert(_torch().ones(2, 2).to_sparse(), "numpy"),
        (interop.UnsupportedTensorError,),
        ("x.to_dense()",),
    ),
    "a wrap target without autodiff": (
        (),
        lambda: interop.wrap(lambda x: x, "jax", "mxnet"),
        (interop.UnknownFrameworkError,),
        ("'jax'", "'torch'"),
    ),
    "a str": (
        (),
        lambda: interop.convert("torch", "numpy"),  # the arguments swapped
        (interop.UnsupportedTensorError, TypeError),
        ("takes the tensor first", "x.encode()"),
    ),
    "a Python float": (
        (),
        lambda: interop.convert(2.5, "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("Python float is a number", "numpy.asarray(x)"),
    ),
    "a Python int": (
        (),
        lambda: interop.convert(3, "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("numpy.asarray(x)",),
    ),
    "a Python bool": (
        (),
        lambda: interop.convert(True, "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("numpy.asarray(x)",),
    ),
    "something else": (
        (),
        lambda: interop.convert(object(), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("numpy.asarray(x)", "install its framework's adapter"),
    ),
    "a list of tensors": (
        ("torch",),
        lambda: interop.convert([_torch().ones(2), _torch().zeros(2)], "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("[0], [1]", "interop.convert_tree(x, to)"),
    ),
    "a pandas Series": (
        ("pandas",),
        lambda: interop.convert(__import__("pandas").Series([1.0, 2.0]), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("pandas Series is not a tensor", "x.to_numpy()"),
    ),
    "a pandas DataFrame": (
        ("pandas",),
        lambda: interop.convert(__import__("pandas").DataFrame({"a": [1.0]}), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("x.to_numpy()", "x[column].to_numpy()"),
    ),
    "a polars Series": (
        ("polars",),
        lambda: interop.convert(__import__("polars").Series([1.0, 2.0]), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("polars Series is not a tensor", "x.to_numpy()"),
    ),
    "a polars DataFrame": (
        ("polars",),
        lambda: interop.convert(__import__("polars").DataFrame({"a": [1.0]}), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("x.to_numpy()",),
    ),
    "a torch meta tensor": (
        ("torch",),
        lambda: interop.convert(_torch().ones(2, device="meta"), "numpy"),
        (interop.UnsupportedTensorError, BufferError),
        ("no data", "torch.empty_like(x, device='cpu')", "model.to_empty(device='cpu')"),
    ),
    "a TensorFlow RaggedTensor": (
        ("tensorflow",),
        lambda: interop.convert(__import__("tensorflow").ragged.constant([[1], [2, 3]]), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("not one buffer", "x.to_tensor()", "x.flat_values"),
    ),
    "a TensorFlow SparseTensor": (
        ("tensorflow",),
        lambda: interop.convert(__import__("tensorflow").sparse.from_dense([[0.0, 1.0]]), "numpy"),
        (interop.UnsupportedTensorError, TypeError),
        ("not one buffer", "tf.sparse.to_dense(x)"),
    ),
    "a torch nested tensor": (
        ("torch",),
        lambda: interop.convert(_nested_torch_tensor(), "numpy"),
        (interop.UnsupportedTensorError, BufferError),
        ("nested tensor", "x.unbind()", "x.to_padded_tensor(0.0)"),
    ),
    "JAX random keys": (
        ("jax",),
        lambda: interop.convert(__import__("jax").random.key(0), "numpy"),
        (interop.UnsupportedDTypeError, TypeError),
        ("random keys", "jax.random.key_data(x)"),
    ),
    "a torch tensor that requires grad": (
        ("torch",),
        lambda: interop.convert(_torch().ones(2, requires_grad=True), "numpy"),
        (interop.UnsupportedTensorError, RuntimeError, BufferError),  # as .numpy(), __dlpack__
        ("x.detach()", "interop.wrap("),
    ),
    "copy= not a flag": (
        ("torch",),
        lambda: interop.convert(_np().ones(2), "torch", copy="yes"),
        (interop.InvalidArgumentError,),
        ("None, True or False",),
    ),
}


def _installed(name: str) -> bool:  # (pandas and polars: ci/requirements-cpu.txt installs them)
    module = {"paddle": "paddle", "mxnet": "mxnet", "mlx": "mlx.core"}.get(name, name)
    return importlib.util.find_spec(module.partition(".")[0]) is not None


def _case(name: str) -> tuple[Callable[[], Any], tuple[type, ...], tuple[str, ...]]:
    """The table's case, skipped where its frameworks are missing."""
    needs, call, kinds, remedy = CASES[name]
    missing = [n for n in needs if not _installed(n)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    if name == "a framework that is not installed" and _installed("cupy"):
        pytest.skip("cupy is installed here")
    return call, kinds, remedy


@pytest.mark.parametrize("name", list(CASES))
def test_each_refusal_names_its_remedy(name):
    call, kinds, remedy = _case(name)
    with pytest.raises(interop.InteropError) as refused:
        call()
    for kind in kinds:
        assert isinstance(refused.value, kind), (type(refused.value).__mro__, kind)
    text = str(refused.value)
    for words in remedy:
        assert words in text, f"{name}: {words!r} not in {text!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_explain_says_each_refusal_and_its_remedy_without_raising(name, monkeypatch):
    """What a user asking "why" gets: the plan says refused, and carries what convert raises
    (malformed arguments excepted: those raise from explain too)."""
    call, _, remedy = _case(name)
    explained: list[Any] = []
    real = interop.convert

    def explain_first(x: Any, to: Any, **options: Any) -> Any:  # each table call's convert
        try:
            explained.append(interop.explain(x, to, **options))
        except interop.InteropError as exc:
            explained.append(exc)
        return real(x, to, **options)  # and the refusal as before

    monkeypatch.setattr(interop, "convert", explain_first)
    with pytest.raises(interop.InteropError) as refused:
        call()
    if not explained:
        return  # (not a convert call: set_immutable_policy, wrap)
    plan = explained[-1]
    if name in ARGUMENT_ERRORS:  # raised by explain as by convert
        assert type(plan) is type(refused.value) and str(plan) == str(refused.value)
        return
    if name in CHECKED_WHEN_RUN:  # a value explain does not read
        assert plan.error is None and "cast" in str(plan), plan
        return
    assert type(plan.error) is type(refused.value), (plan, refused.value)
    assert str(plan.error) == str(refused.value)
    text = str(plan)
    assert "refused" in text and not plan.zero_copy and plan.steps == ()
    for words in remedy:
        assert words in text, f"{name}: {words!r} not in {text!r}"


#: the table's refusals of a malformed argument: explain raises them as convert does
ARGUMENT_ERRORS = {"copy= not a flag", "a misspelt dtype in dtypes=", "unknown framework"}
#: refusals of values, which only convert reads (explain plans the checked cast)
CHECKED_WHEN_RUN = {"a value a checked cast cannot hold"}


def test_bytes_are_a_buffer_and_convert():
    """`bytes` is not a refusal: a Python buffer, shared read-only as uint8 (torch, which
    cannot hold read-only memory, gets a copy)."""
    np = _np()
    got = interop.convert(b"\x01\x02\xff", "numpy")
    assert got.dtype == np.uint8 and got.tolist() == [1, 2, 255] and not got.flags.writeable
    plan = interop.explain(b"\x01\x02\xff", "numpy")
    assert plan.error is None and plan.zero_copy, plan
