"""Each framework's implementation against a float64 reference, and against each other."""

from __future__ import annotations

import numpy as np
import pytest
from xops import FRAMEWORKS, ops

from interop.testing import assert_close, assert_same_across
from interop.testing.frameworks import numpy_dtype

pytestmark = pytest.mark.frameworks(*FRAMEWORKS)

#: unit roundoff of each format: a result a few roundings away is off by a few of them
ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}

CASES = {
    "softmax": lambda m, a: m.softmax(a["x"]),
    "logsumexp": lambda m, a: m.logsumexp(a["x"]),
    "layer_norm": lambda m, a: m.layer_norm(a["x"], a["weight"], a["bias"]),
    "conv1d": lambda m, a: m.conv1d(a["x"], a["kernel"]),
}


def inputs(dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs, already rounded to `dtype` (held in float64 for the reference), so
    that the reference and the framework start from the same numbers."""
    rng = np.random.default_rng(seed)
    raw = {
        "x": rng.standard_normal((8, 128)) * 4,
        "weight": rng.standard_normal(128),
        "bias": rng.standard_normal(128),
        "kernel": rng.standard_normal(16),
    }
    return {k: v.astype(numpy_dtype(dtype)).astype(np.float64) for k, v in raw.items()}


def run(framework, dtype: str, case: str):
    """The case computed by `framework` in `dtype`."""
    data = {k: framework.asarray(v, dtype=dtype) for k, v in inputs(dtype).items()}
    return CASES[case](ops(framework.name), data)


@pytest.mark.dtypes("float32", "float16", "bfloat16")
@pytest.mark.parametrize("case", ["softmax", "logsumexp", "layer_norm", "conv1d"])
def test_matches_float64_reference(framework, dtype, case):
    data = inputs(dtype)
    expected = CASES[case](ops("numpy"), data)
    got = run(framework, dtype, case)
    assert framework.numpy(got).dtype == numpy_dtype(dtype)  # computed in the dtype asked
    tolerance = 8 * ROUNDOFF[dtype]
    # A sum's rounding error grows with its terms' magnitude, not its result's: for a
    # convolution, allow it on the sum of the products' magnitudes.
    scale = 1.0
    if case == "conv1d":
        scale = ops("numpy").conv1d(abs(data["x"]), abs(data["kernel"])).max()
    assert_close(got, expected, rtol=tolerance, atol=tolerance * scale, check_dtype=False)


@pytest.mark.dtypes("float32")
def test_conv1d_agrees_with_torch(framework, dtype):
    torch_side = run(type(framework)("torch"), dtype, "conv1d")
    assert_close(run(framework, dtype, "conv1d"), torch_side)  # the dtype's tolerances


@pytest.mark.dtypes("float16", "bfloat16")
@pytest.mark.xfail_frameworks(
    numpy="NumPy sums float16 and bfloat16 products in their own precision; torch, JAX "
    "and TensorFlow accumulate a convolution in float32 and round once",
    strict=True,
)
def test_half_precision_conv1d_agrees_with_torch(framework, dtype):
    torch_side = run(type(framework)("torch"), dtype, "conv1d")
    assert_close(run(framework, dtype, "conv1d"), torch_side)


@pytest.mark.parametrize("case", ["softmax", "logsumexp", "layer_norm"])
def test_same_values_and_gradients(case):
    """torch, JAX and TensorFlow agree on values and gradients; NumPy on values."""
    data = {k: v.astype(np.float32) for k, v in inputs("float32").items()}

    def impl(name):
        return lambda *arrays: CASES[case](ops(name), dict(zip(data, arrays, strict=True)))

    assert_same_across({name: impl(name) for name in FRAMEWORKS}, *data.values(), grads=True)
