"""Comparing tensors of any frameworks: `assert_close` and `assert_same_across`.

Values are read on the host through `interop.convert` (shared, not copied, where memory can
be shared) and compared in float64 (complex128), so both sides may come from different
frameworks and dtypes. Default tolerances follow `torch.testing.assert_close`: looser for
16-bit floats, tighter for float64, exact for integers and booleans.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..dlpack import DTYPE_CODES
from ..grad.structure import flatten, unflatten
from ..registry import REGISTRY
from ..tree import is_tensor
from .frameworks import Framework, canonical_name, describe, numpy_dtype, to_numpy

#: (rtol, atol) by dtype, as torch.testing.assert_close chooses them
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def tolerances(dtype: str) -> tuple[float, float]:
    """Default (rtol, atol) for `dtype`: the table above; float8 and narrower formats get
    twice their machine epsilon (2**-mantissa bits) as rtol; integers and bool are exact."""
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    mantissa = re.fullmatch(r"float\d_e\dm(\d)\w*", dtype)
    if mantissa:
        return 2.0 * 2.0 ** -int(mantissa.group(1)), 1e-5
    return 0.0, 0.0


def _dtype_of(array: Any) -> str:
    name = str(array.dtype)
    return name if name in DTYPE_CODES else array.dtype.name


def _fail(lines: list[str], actual: Any, expected: Any) -> None:
    lines.append(f"actual: {describe(actual)}; expected: {describe(expected)}")
    raise AssertionError("\n".join(lines))


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    import numpy as np

    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_dtype: bool = True,
    check_device: bool = False,
) -> None:
    """Assert that `actual` and `expected` (tensors of any framework, NumPy arrays, scalars
    or nested lists) hold the same shape and values within `atol + rtol * |expected|`.

    Without `rtol`/`atol`, both come from the dtype (the looser of the two sides' when they
    differ). On mismatch the AssertionError says how many elements differ, the greatest
    absolute and relative difference and where, and what each side is.
    """
    import numpy as np

    if (rtol is None) != (atol is None):
        raise ValueError("assert_close: give both rtol and atol, or neither")
    a, e = to_numpy(actual), to_numpy(expected)
    dtype_a, dtype_e = _dtype_of(a), _dtype_of(e)
    if check_dtype and dtype_a != dtype_e:
        _fail([f"The dtypes differ: {dtype_a} and {dtype_e}."], actual, expected)
    if a.shape != e.shape:
        _fail([f"The shapes differ: {a.shape} and {e.shape}."], actual, expected)
    if check_device:
        where = (describe(actual).rpartition(" on ")[2], describe(expected).rpartition(" on ")[2])
        if where[0] != where[1]:
            _fail([f"The devices differ: {where[0]} and {where[1]}."], actual, expected)
    if rtol is None or atol is None:
        (rtol_a, atol_a), (rtol_e, atol_e) = tolerances(dtype_a), tolerances(dtype_e)
        rtol, atol = max(rtol_a, rtol_e), max(atol_a, atol_e)
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(e) else np.float64
    if a.dtype.kind in "biu" and e.dtype.kind in "biu" and rtol == 0 and atol == 0:
        close = np.asarray(a == e)  # exact, also for 64-bit integers float64 cannot hold
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        reference = np.abs(e.astype(np.float64))
    else:
        aw, ew = a.astype(wide), e.astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(aw - ew)
            reference = np.abs(ew)
            close = (aw == ew) | (diff <= atol + rtol * reference)
        if equal_nan:
            close |= np.isnan(aw) & np.isnan(ew)
    if close.all():
        return
    wrong = ~close
    count, total = int(wrong.sum()), close.size
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(reference > 0, diff / reference, np.where(diff > 0, np.inf, 0.0))
    diff_at = np.where(wrong, np.nan_to_num(diff, nan=np.inf), -1.0)
    rel_at = np.where(wrong, np.nan_to_num(relative, nan=np.inf), -1.0)
    worst, worst_rel = int(np.argmax(diff_at)), int(np.argmax(rel_at))
    shape = a.shape
    _fail(
        [
            "Tensor-likes are not close!",
            "",
            f"Mismatched elements: {count} / {total} ({100.0 * count / total:.1f}%)",
            f"Greatest absolute difference: {diff.reshape(-1)[worst]} at index "
            f"{_index(worst, shape)} (up to {atol} allowed)",
            f"Greatest relative difference: {relative.reshape(-1)[worst_rel]} at index "
            f"{_index(worst_rel, shape)} (up to {rtol} allowed)",
        ],
        actual,
        expected,
    )


def _convert_inputs(framework: Framework, inputs: tuple[Any, ...]) -> list[Any]:
    leaves, tree = flatten(list(inputs))
    moved = [framework.asarray(x) if is_tensor(x, REGISTRY) else x for x in leaves]
    return list(unflatten(tree, moved))


def _compare(what: str, names: tuple[str, str], got: Any, reference: Any, **tolerance: Any) -> None:
    got_leaves, got_tree = flatten(got)
    ref_leaves, ref_tree = flatten(reference)
    got_paths, ref_paths = list(got_tree.paths()), list(ref_tree.paths())
    if got_paths != ref_paths:
        raise AssertionError(
            f"{names[0]} and {names[1]} disagree on the structure of {what}: "
            f"{got_paths or ['(one leaf)']} against {ref_paths or ['(one leaf)']}"
        )
    for path, leaf, ref in zip(got_paths, got_leaves, ref_leaves, strict=True):
        if leaf is None and ref is None:  # an input neither differentiates (integers)
            continue
        try:
            assert_close(leaf, ref, **tolerance)
        except AssertionError as exc:
            raise AssertionError(
                f"{names[0]} and {names[1]} disagree on {what}{path}:\n{exc}"
            ) from None


def _gradients(framework: Framework, impl: Callable[..., Any], args: list[Any]) -> Any:
    """The gradient of the sum of `impl(*args)`'s floating outputs with respect to every
    floating tensor input, by the framework's own autodiff (its adapter's grad source);
    None for a framework without one. Non-floating inputs get None."""
    import numpy as np

    source = framework.adapter.grad_source()
    if source is None:
        return None
    leaves, tree = flatten(args)
    at = [i for i, x in enumerate(leaves) if isinstance(x, source.tensor_types())]
    xs = [leaves[i] for i in at]
    diff = [np.dtype(numpy_dtype(source.dtype(x))).kind in "fc" for x in xs]

    def flat(values: list[Any]) -> list[Any]:
        placed = list(leaves)
        for i, value in zip(at, values, strict=True):
            placed[i] = value
        return flatten(impl(*unflatten(tree, placed)))[0]

    ys, pullback = source.forward(flat, xs, diff, None, conj=not source.conj_vjp)
    floating = [y for y in ys if np.dtype(numpy_dtype(source.dtype(y))).kind in "fc"]
    ones = [np.ones(tuple(y.shape), numpy_dtype(source.dtype(y))) for y in floating]
    ones = [framework.asarray(one) for one in ones]
    grads = iter(pullback(ones))
    out: list[Any] = [None] * len(leaves)
    for i, differentiable in zip(at, diff, strict=True):
        if differentiable:
            out[i] = next(grads)
    return unflatten(tree, out)


def assert_same_across(
    impls: Mapping[str, Callable[..., Any]],
    *inputs: Any,
    grads: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
    device: str = "cpu",
) -> None:
    """Run each framework's implementation of one function on `inputs` converted into that
    framework (tensor leaves of any framework; other arguments as they are) and assert every
    result (a tensor or a pytree of them) is close to the first framework's.

    `grads=True` also compares the gradient of the sum of the outputs with respect to every
    floating input, each framework differentiating natively (torch.autograd, jax.vjp,
    tf.GradientTape); frameworks without autodiff here (NumPy, ...) are compared on values
    only. An AssertionError names the pair that disagrees, and on what.
    """
    if len(impls) < 2:
        raise ValueError("assert_same_across needs implementations for two frameworks or more")
    tolerance = {"rtol": rtol, "atol": atol, "check_dtype": check_dtype}
    runs = []
    for key, impl in impls.items():
        framework = Framework(canonical_name(key, "assert_same_across"), device)
        args = _convert_inputs(framework, inputs)
        runs.append((key, framework, impl, args, impl(*args)))
    first = runs[0]
    for key, _, _, _, result in runs[1:]:
        _compare("the output", (key, first[0]), result, first[4], **tolerance)
    if not grads:
        return
    differentiated = [
        (key, g)
        for key, framework, impl, args, _ in runs
        if (g := _gradients(framework, impl, args)) is not None
    ]
    if len(differentiated) < 2:
        able = [a.name for a in REGISTRY.loaded() if a.grad_source() is not None]
        raise ValueError(
            "grads=True needs two frameworks that differentiate natively among "
            f"{list(impls)}; frameworks with autodiff here: {', '.join(able)}"
        )
    (ref_key, ref), *others = differentiated
    for key, g in others:
        _compare("the gradient of input ", (key, ref_key), g, ref, **tolerance)
