"""The cross-framework pytest plugin (`interop_pytest`) and `interop.testing`'s comparisons.

Plugin runs happen in a fresh pytest process (pytester's) over a small project, as a user's
would (the plugin is found through its pytest11 entry point); the comparisons run here,
on planted differences, and their messages are read back.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from interop.testing import assert_close, assert_same_across, tolerances

ROOT = Path(__file__).resolve().parent.parent
FOUR = "--frameworks=numpy,torch,jax,tensorflow"


pytest_plugins = ["pytester"]


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """pytest in a fresh process over files written into pytester's folder, as a user runs
    it (the plugin found through its entry point, JAX without x64): (exit code, output)."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("JAX_ENABLE_X64", raising=False)

    def run(files: dict[str, str], *args: str) -> tuple[int, str]:
        for name, text in files.items():
            (pytester.path / name).write_text(text)
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-rfEsx", *args, timeout=600
        )
        return int(result.ret), "\n".join(result.outlines + result.errlines)

    return run


def table(output: str) -> dict[str, tuple[int, ...]]:
    """The plugin's per-framework table: id -> (passed, failed, skipped, xfailed)."""
    rows = re.findall(r"^(\w+-\w+) +(\d+) +(\d+) +(\d+) +(\d+)$", output, re.M)
    return {row[0]: tuple(int(n) for n in row[1:]) for row in rows}


USES = """
import numpy as np
import pytest

NAMESPACES = {"numpy": "numpy", "torch": "torch", "jax": "jax.numpy",
              "tensorflow": "tensorflow._api.v2.experimental.numpy"}

def test_plain():
    pass

def test_every_framework(framework):
    assert framework.xp.__name__ == NAMESPACES[framework.name]
    x = framework.asarray([[1.0, 2.0], [3.0, 4.0]])
    total = framework.xp.sum(x)  # the framework's own kernel
    assert float(framework.numpy(total)) == 10.0
    assert framework.numpy(x).dtype == np.float32  # Python floats: the frameworks' float32
    shared = np.arange(6, dtype=np.float32) if framework.name != "tensorflow" else None
    if shared is not None:  # NumPy memory shared with torch and NumPy itself
        y = framework.asarray(shared)
        assert float(framework.numpy(framework.xp.sum(y))) == 15.0
"""


def test_framework_fixture_runs_once_per_framework(run_pytest) -> None:
    code, out = run_pytest({"test_uses.py": USES}, FOUR, "-v")
    assert code == 0, out
    ran = re.findall(r"test_uses\.py::(\S+) PASSED", out)
    assert sorted(ran) == sorted(
        ["test_plain"]
        + [f"test_every_framework[{n}-cpu]" for n in ("numpy", "torch", "jax", "tensorflow")]
    )
    assert table(out) == {f"{n}-cpu": (1, 0, 0, 0) for n in ("numpy", "torch", "jax", "tensorflow")}


MARKERS = """
import numpy as np
import pytest

@pytest.mark.frameworks("torch", "jax")
def test_only(framework):
    assert framework.name in ("torch", "jax")

@pytest.mark.skip_frameworks(jax="planted skip")
def test_skipped(framework):
    assert framework.name != "jax"

@pytest.mark.xfail_frameworks(numpy="planted failure", strict=True)
def test_xfail(framework):
    assert framework.name != "numpy"

@pytest.mark.frameworks("torch")
@pytest.mark.xfail_frameworks(torch="passes, so strict fails it", strict=True)
def test_strict(framework):
    pass

@pytest.mark.frameworks("numpy", "jax", "torch")
@pytest.mark.dtypes("float64", "bfloat16")
def test_dtypes(framework, dtype):
    x = framework.asarray([1.5, 2.5], dtype=dtype)
    assert x.dtype == framework.dtype(dtype)
    assert str(framework.numpy(x).dtype) == dtype
"""


def test_markers_and_dtype_skips(run_pytest) -> None:
    code, out = run_pytest({"test_markers.py": MARKERS}, "--frameworks=numpy,torch,jax")
    assert code == 1, out  # only test_strict fails: XPASS(strict)
    assert re.search(r"FAILED test_markers.py::test_strict\[torch-cpu\]", out), out
    assert "1 failed" in out and "FAILED" not in out.replace(
        "FAILED test_markers.py::test_strict", ""
    )
    assert "jax-cpu: planted skip" in out
    assert re.search(r"XFAIL test_markers.py::test_xfail\[numpy-cpu\]", out), out
    assert "test_only[numpy-cpu]" not in out
    # JAX without x64 cannot hold float64: skipped with JAX's reason, never run as float32
    assert re.search(r"jax-cpu cannot hold float64: .*jax_enable_x64 is off", out), out
    assert table(out) == {
        "jax-cpu": (3, 0, 2, 0),  # only, xfail, dtypes[bf16]; skipped, dtypes[f64]
        "numpy-cpu": (3, 0, 0, 1),  # skipped, dtypes x2; xfail
        "torch-cpu": (5, 1, 0, 0),  # only, skipped, xfail, dtypes x2; strict
    }


KERNELS = """
import numpy as np
import pytest

@pytest.mark.frameworks("numpy", "torch")
@pytest.mark.dtypes("uint32", "float32")
def test_add(framework, dtype):
    x = framework.asarray(np.arange(3), dtype=dtype)
    assert framework.numpy(x + x).tolist() == [0, 2, 4]

@pytest.mark.frameworks("torch")
@pytest.mark.dtypes("float32")
def test_planted(framework, dtype):
    assert False
"""


def test_a_failure_in_a_dtype_its_adapter_notes_names_the_note(run_pytest) -> None:
    """torch holds uint32 but cannot add it on the CPU: the failing case is torch's own
    error, and the summary adds what torch's adapter says of uint32. A failure in a dtype
    without a note (float32, planted) gets no such line."""
    code, out = run_pytest({"test_kernels.py": KERNELS}, "--frameworks=numpy,torch")
    assert code == 1, out
    assert re.search(r"FAILED test_kernels.py::test_add\[torch-cpu-uint32\]", out), out
    assert table(out) == {"numpy-cpu": (2, 0, 0, 0), "torch-cpu": (1, 2, 0, 0)}
    (line,) = [row for row in out.splitlines() if row.startswith("failed ")]
    assert line.startswith("failed 1 on torch-cpu in uint32; its adapter notes: torch has only")
    assert "addition" in line


def test_usage_errors(run_pytest) -> None:
    files = {"test_uses.py": USES}
    code, out = run_pytest(files, "--frameworks=torch,nosuch")
    assert code == 4 and "unknown framework 'nosuch'; known:" in out and "torch" in out, out
    code, out = run_pytest(files, "--devices=tpu")
    assert code == 4 and "unknown device 'tpu'; known: cpu, cuda, rocm" in out, out
    code, out = run_pytest(files, "--frameworks=cupy")  # adapter here, CuPy not
    assert code == 4 and "cupy is not installed (pip install cupy" in out, out


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('dtypes("floot32")', "@pytest.mark.dtypes: unknown dtype 'floot32'; known: bool"),
        ('skip_frameworks(jaxx="typo")', "@pytest.mark.skip_frameworks: unknown framework 'jaxx'"),
        ('frameworks("torch", "tourch")', "@pytest.mark.frameworks: unknown framework 'tourch'"),
    ],
)
def test_unknown_marker_arguments_are_collection_errors(
    run_pytest, marker: str, message: str
) -> None:
    bad = f"import pytest\n\n@pytest.mark.{marker}\ndef test_a(framework, dtype):\n    pass\n"
    code, out = run_pytest({"test_bad.py": bad}, "--frameworks=numpy")
    assert code == 2, out
    assert f"test_bad.py::test_a: {message}" in out, out


def test_cuda_cases_run_only_where_a_gpu_is_visible(run_pytest) -> None:
    # (nothing imported here: pytester takes back the modules a test imports)
    code, out = run_pytest({"test_uses.py": USES}, "--frameworks=torch", "--devices=cpu,cuda")
    assert code == 0, out
    rows = table(out)
    assert rows["torch-cpu"] == (1, 0, 0, 0), out
    if rows["torch-cuda"] != (1, 0, 0, 0):  # no GPU: skipped, saying why
        assert rows["torch-cuda"] == (0, 0, 1, 0), out
        assert re.search(r"skipped 1 on torch-cuda: torch-cuda: .*(CUDA|cuda)", out), out


def test_plugin_is_inert_when_unused(run_pytest) -> None:
    plain = """
import sys

def test_nothing_of_ours_is_imported():
    loaded = sorted(
        m for m in sys.modules
        if m.split(".")[0] in {"interop", "numpy", "torch", "jax", "tensorflow", "paddle", "mxnet"}
    )
    assert loaded == []
    assert "interop_pytest" in sys.modules  # the plugin itself is loaded
"""
    code, out = run_pytest({"test_plain.py": plain})
    assert code == 0, out
    assert "interop: results per framework" not in out


def test_example_project(run_pytest, pytester: pytest.Pytester) -> None:
    """examples/cross_framework_tests passes under pytest-xdist, the recorded disagreement
    included (a strict xfail: it fails the run the day NumPy agrees)."""
    example = ROOT / "examples" / "cross_framework_tests"
    files = {str(p.relative_to(example)): p.read_text() for p in example.rglob("*.py")}
    for folder in ("xops", "tests"):
        (pytester.path / folder).mkdir()
    files["pyproject.toml"] = (example / "pyproject.toml").read_text()
    code, out = run_pytest(files, FOUR, "-n", "2")
    assert code == 0, out
    rows = table(out)
    assert rows["numpy-cpu"] == (13, 0, 0, 2), out
    assert all(rows[f"{n}-cpu"] == (15, 0, 0, 0) for n in ("torch", "jax", "tensorflow")), out


def test_docs_example_runs_as_written(run_pytest) -> None:
    text = (ROOT / "docs" / "testing.md").read_text()
    found = re.search(r"<!-- test_softmax.py -->\n```python\n(.*?)```", text, re.S)
    assert found is not None
    code, out = run_pytest({"test_softmax.py": found.group(1)}, "--frameworks=numpy,torch,jax")
    assert code == 0, out
    assert table(out) == {
        "jax-cpu": (2, 0, 1, 0),
        "numpy-cpu": (3, 0, 0, 0),
        "torch-cpu": (3, 0, 0, 0),
    }
    assert "9 passed, 1 skipped" in out  # the fixture's 8 and the comparison's 1


# --- the comparisons, on planted differences --------------------------------------------------
def test_assert_close_across_frameworks_and_its_message() -> None:
    import jax.numpy as jnp
    import torch

    assert_close(torch.tensor([1.0, 2.0]), jnp.asarray([1.0, 2.0], dtype=jnp.float32))
    with pytest.raises(AssertionError) as caught:
        assert_close(
            torch.arange(12.0).reshape(3, 4) + torch.tensor([0.0] * 11 + [0.5]).reshape(3, 4),
            jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4),
        )
    text = str(caught.value)
    assert "Mismatched elements: 1 / 12 (8.3%)" in text
    assert "Greatest absolute difference: 0.5 at index (2, 3) (up to 1e-05 allowed)" in text
    assert "Greatest relative difference: 0.0454545" in text and "at index (2, 3)" in text
    assert "actual: torch float32 on cpu; expected: jax float32 on cpu" in text


def test_assert_close_default_tolerances_follow_the_dtype() -> None:
    import torch

    base = np.ones(4, np.float32)
    off = base * (1 + 4e-3)  # within bfloat16's 1.6e-2, far outside float32's 1.3e-6
    assert_close(torch.tensor(off).to(torch.bfloat16), torch.tensor(base).to(torch.bfloat16))
    with pytest.raises(AssertionError, match="up to 1.3e-06 allowed"):
        assert_close(off, base)
    assert tolerances("float64") == (1e-7, 1e-7) and tolerances("int32") == (0.0, 0.0)
    assert tolerances("float8_e4m3fn") == (0.25, 1e-5)  # two epsilons of 3 mantissa bits
    with pytest.raises(AssertionError, match="The dtypes differ: float32 and float64"):
        assert_close(base, base.astype(np.float64))
    assert_close(base, base.astype(np.float64), check_dtype=False)
    with pytest.raises(AssertionError, match=r"The shapes differ: \(4,\) and \(2, 2\)"):
        assert_close(base, base.reshape(2, 2))
    nan = np.array([1.0, np.nan])
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        assert_close(nan, nan)
    assert_close(nan, nan, equal_nan=True)
    big = np.array([2**62 + 1], np.int64)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1"):
        assert_close(big, big - 1)  # exact for integers float64 cannot tell apart


def test_assert_close_reads_tensors_that_require_grad() -> None:
    import torch

    w = torch.ones(3, requires_grad=True)
    assert_close(w * 2, [2.0, 2.0, 2.0], check_dtype=False)


def _softmax_pair() -> dict[str, object]:
    import jax
    import torch

    return {"torch": lambda x: torch.softmax(x, -1), "jax": lambda x: jax.nn.softmax(x, axis=-1)}


def test_assert_same_across_values_and_gradients() -> None:
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    assert_same_across(_softmax_pair(), x, grads=True)


def test_assert_same_across_names_the_pair_on_a_planted_value() -> None:
    import jax
    import torch

    impls = {
        "torch": lambda x: {"y": torch.tanh(x)},
        "numpy": lambda x: {"y": np.tanh(x)},
        "jax": lambda x: {"y": jax.numpy.tanh(x) * 1.01},
    }
    with pytest.raises(AssertionError, match=r"jax and torch disagree on the output\['y'\]"):
        assert_same_across(impls, np.ones((2, 2), np.float32))


def test_assert_same_across_names_the_pair_on_a_planted_gradient() -> None:
    import jax
    import torch

    impls = {
        "torch": lambda x: torch.softmax(x, -1) ** 2,
        # the same values, but JAX is told the softmax has no gradient
        "jax": lambda x: jax.lax.stop_gradient(jax.nn.softmax(x, axis=-1)) ** 2,
    }
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    assert_same_across(impls, x)  # values agree
    with pytest.raises(
        AssertionError, match=r"jax and torch disagree on the gradient of input \[0\]"
    ):
        assert_same_across(impls, x, grads=True)


def test_assert_same_across_needs_two_differentiable_frameworks() -> None:
    impls = {"numpy": np.tanh, "torch": __import__("torch").tanh}
    with pytest.raises(ValueError, match="two frameworks that differentiate natively"):
        assert_same_across(impls, np.ones(2, np.float32), grads=True)
