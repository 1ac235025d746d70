"""Differential fuzzing: random tensors through random chains of one to three conversions.

Hypothesis draws a source (framework, dtype, shape, strides or view, offset, alignment,
read-only) and a chain of hops (target and `copy=` flag each); a worker process builds the
tensor and runs the chain. The oracle is the frameworks' own read-back (`Adapter.to_bytes`,
`Adapter.data_address`): after every hop the values are the source's, the result is used by
the target's own kernels (`Adapter.exercise`), `copy=True` never aliases the tensor it was
given, `copy=False` never copies (when it succeeds), and memory that was read-only at the
start is never written through the end of the chain.

An example that kills the worker fails the test with the example named; the next one starts
a fresh worker. The CI-sized run is derandomized; `INTEROP_FUZZ_EXAMPLES` sets the examples
per family (100 here; `tox -e fuzz` runs 2,000), `INTEROP_FUZZ_RANDOM=1` draws new ones each run and
`INTEROP_FUZZ_SHRINK=1` lets Hypothesis shrink a failure (each crash then costs a restart).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import time
from typing import Any

import pytest

import interop
from interop.registry import REGISTRY
from interop.testing.isolation import DIED, HUNG, RAISED, Worker
from interop.testing.suite import DTYPES, LAYOUTS, usable_adapters, use_result

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
np = pytest.importorskip("numpy")

EXAMPLES = int(os.environ.get("INTEROP_FUZZ_EXAMPLES", "100"))
RANDOM = os.environ.get("INTEROP_FUZZ_RANDOM", "") not in ("", "0")
SHRINK = os.environ.get("INTEROP_FUZZ_SHRINK", "") not in ("", "0")
#: sources whose strides the fuzzer sets itself; others use their own views
STRIDED_SOURCES = ("numpy", "torch")


# --- building the source, in the worker --------------------------------------------------------
def _numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def _values(dtype: str, count: int, seed: int) -> Any:
    """`count` values of `dtype` from `seed`: the full range for integers, quarters in
    [-16, 16] for floats, so that x + x and short sums are exact in every format."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    quarters = rng.integers(-64, 65, (2, count)) / 4
    if dtype.startswith("complex"):
        return (quarters[0] + 1j * quarters[1]).astype(dtype)
    return quarters[0].astype(_numpy_dtype(dtype))


def _strided_numpy(ex: dict[str, Any]) -> Any:
    """A NumPy view: `shape` after taking every `steps[i]`-th element (negative: reversed) of
    a base buffer that starts `misalign` bytes past a 64-byte boundary, `offset` elements in,
    then transposed by `perm`."""
    dtype = _numpy_dtype(ex["dtype"])
    base_shape = [n * abs(k) for n, k in zip(ex["shape"], ex["steps"], strict=True)]
    count = math.prod(base_shape) + ex["offset"]
    raw = np.zeros(count * dtype.itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + ex["misalign"]
    flat = raw[start : start + count * dtype.itemsize].view(dtype)
    flat[...] = _values(ex["dtype"], count, ex["seed"])
    base = flat[ex["offset"] :].reshape(base_shape)
    steps = tuple(slice(None, None, k) for k in ex["steps"])
    view = base[(*steps, ...)].transpose(ex["perm"])  # `...`: a 0-d view, not a scalar
    if ex["read_only"]:
        view.flags.writeable = False
    return view


def _strided_torch(ex: dict[str, Any]) -> Any:
    """The same layout in torch storage (positive steps only: torch has no negative strides)."""
    import torch

    dtype = getattr(torch, ex["dtype"])
    steps = [abs(k) for k in ex["steps"]]
    shape = ex["shape"]
    base_shape = [n * k for n, k in zip(shape, steps, strict=True)]
    count = math.prod(base_shape) + ex["offset"]
    raw = _values(ex["dtype"], count, ex["seed"])
    flat = torch.tensor(raw.view(np.uint8)).view(dtype)
    strides, step = [], 1
    for extent, k in zip(reversed(base_shape), reversed(steps), strict=True):
        strides.append(step * k)
        step *= max(extent, 1)
    view = flat.as_strided(shape, list(reversed(strides)), ex["offset"])
    return view.permute(ex["perm"])


def make_source(ex: dict[str, Any]) -> Any:
    if ex["source"] == "numpy":
        return _strided_numpy(ex)
    if ex["source"] == "torch":
        return _strided_torch(ex)
    src = REGISTRY.get(ex["source"])
    x = src.sample(ex["dtype"], tuple(ex["shape"]))
    if ex["view"] == "contiguous" or len(ex["shape"]) < 2:  # views are for 2-D and up
        return x
    return src.views(x).get(ex["view"], x)


# --- one example: build, convert hop by hop, check ---------------------------------------------
def run_example(ex: dict[str, Any]) -> list[str]:
    """Run one drawn example; returns what each hop did (for the report)."""
    holder = REGISTRY.get(ex["source"])
    source = x = make_source(ex)
    origin = holder.to_bytes(x)
    size = math.prod(int(n) for n in x.shape)
    origin_address = holder.data_address(x) if size else None
    read_only = ex["source"] == "numpy" and not x.flags.writeable
    done = []
    for target, copy in ex["hops"]:
        dst = REGISTRY.get(target)
        given = holder.data_address(x) if size else None
        try:
            y = interop.convert(x, target, copy=copy)
        except interop.UnsupportedDTypeError as err:
            assert ex["dtype"] in str(err), f"the refusal does not name the dtype: {err}"
            done.append(f"{target}: {ex['dtype']} refused")
            break
        except interop.UnsupportedLayoutError as err:
            caps = dst.capabilities()  # a declared dimension limit: MXNet has no 0-d tensors
            fits = caps.min_ndim <= x.ndim and (caps.max_ndim is None or x.ndim <= caps.max_ndim)
            if fits:
                raise
            assert f"{x.ndim}-dimensional" in str(err), f"the refusal does not say why: {err}"
            done.append(f"{target}: {x.ndim} dimensions refused")
            break
        except interop.InteropError as err:
            assert copy is False and isinstance(err, BufferError), f"{target}: {err!r}"
            done.append(f"{target}: copy=False refused")
            y, copy = interop.convert(x, target), None
        assert dst.to_bytes(y) == origin, f"{target}: the values changed"
        use_result(dst, y, ex["dtype"], origin, f"{target}'s result")
        shared = bool(size) and dst.data_address(y) == given
        if size and copy is True:
            assert not shared and dst.data_address(y) != origin_address, (
                f"{target}: copy=True shared"
            )
        if size and copy is False:
            assert shared, f"{target}: copy=False copied"
        done.append(f"{target}: {'shared' if shared else 'copied'}")
        holder, x = dst, y
    if read_only and size:
        holder.mutate(x)  # the framework's own write, where its API allows one
        assert source.tobytes() == origin, "read-only memory was written through the chain"
    return done


# --- drawing examples, in pytest ---------------------------------------------------------------
FAMILIES = {
    "pairs": "one hop, TensorFlow not involved",
    "chains": "two or three hops, TensorFlow not involved",
    "tensorflow": "one to three hops, TensorFlow involved",
}
HOPS = {"pairs": (1, 1), "chains": (2, 3), "tensorflow": (1, 3)}
#: where a NumPy source's buffer starts past a 64-byte boundary (fresh arrays: 0, 16, 32, 48);
#: 0 twice, as aligned buffers are the ones JAX and TensorFlow share
MISALIGN = (0, 16, 0, 32, 48, 8, 4)


def _names() -> list[str]:
    return [a.name for a in usable_adapters()]


def _dtypes(name: str) -> list[str]:
    exported = REGISTRY.get(name).capabilities().export_dtypes
    return [d for d in DTYPES if d in exported]


@st.composite
def examples(draw: Any, family: str) -> dict[str, Any]:
    names = _names()
    pool = names if family == "tensorflow" else [n for n in names if n != "tensorflow"]
    source = draw(st.sampled_from(pool))
    dtype = draw(st.sampled_from(_dtypes(source)))
    ndim = draw(st.integers(0, 3))
    shape = draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim))
    itemsize = max(interop.dlpack.dtype_bits(dtype) // 8, 1)
    ex: dict[str, Any] = {
        "source": source,
        "dtype": dtype,
        "shape": shape,
        "steps": [1] * ndim,
        "perm": list(range(ndim)),
        "offset": 0,
        "misalign": 0,
        "read_only": False,
        "seed": draw(st.integers(0, 2**32 - 1)),
        "view": "contiguous",
    }
    if source in STRIDED_SOURCES:
        steps = [1, 2, -1, -2] if source == "numpy" else [1, 2]
        ex["steps"] = draw(st.lists(st.sampled_from(steps), min_size=ndim, max_size=ndim))
        ex["perm"] = draw(st.permutations(range(ndim)))
        ex["offset"] = draw(st.integers(0, 3))
    if source == "numpy":
        misaligned = [m for m in MISALIGN if m % itemsize == 0]
        ex["misalign"] = draw(st.sampled_from(misaligned))
        ex["read_only"] = draw(st.booleans())
    else:
        ex["view"] = draw(st.sampled_from(LAYOUTS))  # the framework's own views
    length = draw(st.integers(*HOPS[family]))
    hops, holder = [], source
    for _ in range(length):
        target = draw(st.sampled_from([n for n in pool if n != holder]))
        hops.append([target, draw(st.sampled_from([None, True, False]))])
        holder = target
    if family == "tensorflow" and "tensorflow" not in (source, *(h[0] for h in hops)):
        hops[-1][0] = "tensorflow"  # no hop before it holds TensorFlow: still a real hop
    return ex | {"hops": hops}


def describe(ex: dict[str, Any]) -> str:
    """An example as a person reads it."""
    layout = f"shape {ex['shape']}"
    if ex["source"] in STRIDED_SOURCES:
        layout += f", steps {ex['steps']}, perm {ex['perm']}, offset {ex['offset']}"
        layout += f", {ex['misalign']} bytes past 64" if ex["source"] == "numpy" else ""
    else:
        layout += f", {ex['view']}"
    ro = ", read-only" if ex["read_only"] else ""
    hops = " -> ".join(f"{t}(copy={c})" for t, c in ex["hops"])
    return f"{ex['source']} {ex['dtype']} ({layout}{ro}, seed {ex['seed']}) -> {hops}"


def _settings() -> Any:
    phases = [hypothesis.Phase.explicit, hypothesis.Phase.generate]
    return hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        phases=phases + ([hypothesis.Phase.shrink] if SHRINK else []),
        suppress_health_check=list(hypothesis.HealthCheck),
    )


@pytest.fixture(scope="module")
def worker():
    with Worker(timeout=45) as shared:  # an example takes seconds, the first one imports all
        yield shared


@pytest.mark.parametrize("family", list(FAMILIES), ids=list(FAMILIES))
def test_fuzz(worker, family):
    if family == "tensorflow" and "tensorflow" not in _names():
        pytest.skip("tensorflow is not installed here")
    if len(_names()) < (2 if family == "pairs" else 3):
        pytest.skip(f"{FAMILIES[family]}: too few frameworks installed here")

    failed: dict[str, Any] = {}  # Hypothesis runs a failing example again to report it

    @_settings()
    @hypothesis.given(examples(family))
    def check(ex: dict[str, Any]) -> None:
        key = json.dumps(ex, sort_keys=True)
        outcome = failed.get(key) or worker.call(run_example, ex)
        if not outcome.ok:
            failed[key] = outcome  # a hang costs the timeout once, not twice
            raise AssertionError(f"{describe(ex)}\n{outcome}")

    check()


# --- the worker itself: an abort, an exception and a hang each fail one case ------------------
def _abort() -> None:
    os.abort()


def _raise() -> None:
    raise ValueError("a case that raises")


def _echo(value: Any) -> Any:
    return value


def test_the_worker_names_an_abort_and_recovers():
    with Worker() as worker:
        assert worker.call(_echo, [1, "two"]).unwrap() == [1, "two"]
        died = worker.call(_abort)
        assert not died.ok and died.failure == DIED
        assert signal.Signals.SIGABRT.name in died.error
        assert worker.call(_echo, 3).unwrap() == 3 and worker.starts == 2


def test_the_worker_reports_exceptions_with_their_traceback():
    with Worker() as worker:
        raised = worker.call(_raise)
        assert raised.failure == RAISED and raised.error == "ValueError: a case that raises"
        assert "_raise" in raised.detail and worker.starts == 1


def test_the_worker_kills_a_hung_case_and_recovers():
    with Worker(timeout=3) as worker:
        started = time.monotonic()
        hung = worker.call(time.sleep, 60)
        assert hung.failure == HUNG and time.monotonic() - started < 30
        assert re.search(r"isolation\.py:\d+ serve", hung.detail), f"no stack: {hung.detail}"
        if shutil.which("gdb"):  # the native frames too: where the case waits
            assert "nanosleep" in hung.detail, f"no native stack: {hung.detail}"
        assert worker.call(_echo, "alive").unwrap() == "alive" and worker.starts == 2
