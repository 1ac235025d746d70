"""`interop.aligned_numpy()`: NumPy arrays made inside are 64-byte aligned and reach JAX and
TensorFlow zero-copy (by data address, used in their kernels); outside nothing changes; what
was made inside stays valid and is freed by the allocator that made it; the pure-Python twin
refuses with a typed error naming the fix."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

import interop
from interop.api import HUB
from interop.capsule import RELEASES
from interop.testing.isolation import Worker

np = pytest.importorskip("numpy")
try:
    from numpy._core import multiarray
except ImportError:  # NumPy 1.x
    from numpy.core import multiarray  # type: ignore[no-redef]

ALIGNED, DEFAULT = "interop_aligned_64", "default_allocator"
HAS_ALIGNED = RELEASES.aligned_handler() is not None
compiled = pytest.mark.skipif(
    not HAS_ALIGNED,
    reason="aligned NumPy memory needs the compiled accelerator (the pure twin refuses: "
    "test_pure_twin_refuses_naming_the_fix)",
)


def made_by_numpy() -> dict[str, object]:
    """Arrays from NumPy's own functions: each allocates fresh data (calloc for zeros)."""
    a = np.arange(4096, dtype=np.float32)
    return {
        "ones": np.ones((64, 64), np.float32),
        "zeros": np.zeros(4097, np.float32),
        "stack": np.stack([a, a]),
        "arange": a,
        "concatenate": np.concatenate([a, a[:5]]),
        "ufunc": np.sin(a) * 2,
        "standard_normal": np.random.default_rng(0).standard_normal(1000, dtype=np.float32),
    }


def target_address(to: str, y: object) -> int:
    """The data address of `y` by its framework's own API (TensorFlow's through its adapter,
    which reads its DLPack export)."""
    if to == "jax":
        return int(y.unsafe_buffer_pointer())  # type: ignore[attr-defined]
    return int(HUB.target(to).data_address(y))


def kernel_sum(to: str, y: object) -> float:
    """The sum computed by the target's own kernel."""
    if to == "jax":
        import jax.numpy as jnp

        return float(jnp.sum(y))
    import tensorflow as tf

    return float(tf.reduce_sum(y))


@pytest.fixture(params=["jax", "tensorflow"])
def to(request: pytest.FixtureRequest) -> str:
    pytest.importorskip(request.param)
    return str(request.param)


@compiled
def test_arrays_made_inside_reach_jax_and_tensorflow_zero_copy(to: str) -> None:
    with interop.aligned_numpy():
        assert multiarray.get_handler_name() == ALIGNED
        made = made_by_numpy()
    assert multiarray.get_handler_name() == DEFAULT
    for name, x in made.items():
        assert multiarray.get_handler_name(x) == ALIGNED, name
        assert x.ctypes.data % 64 == 0, name
        assert interop.explain(x, to).zero_copy, name
        y = interop.convert(x, to, copy=False)
        assert target_address(to, y) == x.ctypes.data, name
        assert kernel_sum(to, y) == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-5)


def test_outside_numpy_allocates_as_before() -> None:
    x = np.ones(1000, np.float32)
    assert multiarray.get_handler_name() == DEFAULT
    assert multiarray.get_handler_name(x) == DEFAULT


@compiled
def test_block_restores_the_allocator_it_found() -> None:
    with pytest.raises(KeyError):
        with interop.aligned_numpy():
            raise KeyError("inside")
    assert multiarray.get_handler_name() == DEFAULT
    interop.set_aligned_numpy(True)
    try:
        assert multiarray.get_handler_name(np.ones(3)) == ALIGNED
        with interop.aligned_numpy():
            interop.set_aligned_numpy(False)  # the block's own switch, undone when it ends
            assert multiarray.get_handler_name(np.ones(3)) == DEFAULT
        assert multiarray.get_handler_name() == ALIGNED
    finally:
        interop.set_aligned_numpy(False)
    assert multiarray.get_handler_name() == DEFAULT


def test_switch_takes_a_bool() -> None:
    with pytest.raises(interop.InvalidArgumentError, match="True or False, not 'yes'"):
        interop.set_aligned_numpy("yes")  # type: ignore[arg-type]
    interop.set_aligned_numpy(False)  # NumPy's default: no accelerator needed
    assert multiarray.get_handler_name() == DEFAULT


def test_numpy_without_the_allocator_hook_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from interop_numpy import allocator

    monkeypatch.setattr(allocator, "_multiarray", lambda: object())  # as NumPy < 1.22's
    allocator._hook.cache_clear()
    try:
        with pytest.raises(interop.AlignedNumpyUnavailableError, match="upgrade to NumPy >= 1.22"):
            interop.set_aligned_numpy(False)
    finally:
        allocator._hook.cache_clear()


@compiled
def test_other_threads_and_tasks_are_unaffected() -> None:
    entered, checked = threading.Event(), threading.Event()
    seen: list[str] = []

    def worker() -> None:  # started before the block: its own context
        entered.wait(10)
        seen.append(multiarray.get_handler_name(np.ones(8)))
        checked.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with interop.aligned_numpy():
        entered.set()
        assert checked.wait(10)
        inside = multiarray.get_handler_name(np.ones(8))
    thread.join()
    assert (inside, seen) == (ALIGNED, [DEFAULT])

    async def aligned_task(gate: asyncio.Event) -> str:
        with interop.aligned_numpy():
            gate.set()
            await asyncio.sleep(0.01)  # the other task runs while this one is inside
            return str(multiarray.get_handler_name(np.ones(8)))

    async def plain_task(gate: asyncio.Event) -> str:
        await gate.wait()
        return str(multiarray.get_handler_name(np.ones(8)))

    async def both() -> list[str]:
        gate = asyncio.Event()
        return list(await asyncio.gather(aligned_task(gate), plain_task(gate)))

    assert asyncio.run(both()) == [ALIGNED, DEFAULT]


@compiled
def test_arrays_outlive_the_block_and_numpy_traces_them() -> None:
    domain = multiarray.tracemalloc_domain
    only_numpy = [tracemalloc.DomainFilter(True, domain)]

    def traced() -> int:
        stats = tracemalloc.take_snapshot().filter_traces(only_numpy).statistics("filename")
        return sum(s.size for s in stats)

    tracemalloc.start()
    try:
        gc.collect()
        before = traced()
        with interop.aligned_numpy():
            arrays = [np.full(25_000 + i, i, np.float32) for i in range(20)]
        gc.collect()
        nbytes = sum(a.nbytes for a in arrays)
        assert traced() - before == nbytes  # every block NumPy made through ours, reported
        # used after the block, in NumPy and in JAX where installed
        assert [float(a[-1]) for a in arrays] == [float(i) for i in range(20)]
        del arrays
        gc.collect()
        assert traced() == before  # and each one freed (NumPy untracks in its free)
    finally:
        tracemalloc.stop()


def resident_growth(rounds: int, arrays: int, nbytes: int) -> int:
    """In a child: RSS growth (bytes) over `rounds` of making `arrays` arrays inside the block,
    leaving it, using them after it and dropping them; the first round is the baseline."""
    import numpy

    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    def one_round(seed: int) -> None:
        with interop.aligned_numpy():
            made = [numpy.full(nbytes // 4, seed + i, numpy.float32) for i in range(arrays)]
        assert all(m.ctypes.data % 64 == 0 and float(m[-1]) == seed + i for i, m in enumerate(made))

    one_round(0)
    start = rss()
    for r in range(rounds):
        one_round(r)
    return rss() - start


@compiled
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_returns_after_many_arrays_made_inside() -> None:
    rounds, arrays, nbytes = 12, 16, 4 << 20  # 768 MB made in all, 64 MB live at most
    with Worker(timeout=120) as child:
        growth = child.call(resident_growth, rounds, arrays, nbytes).unwrap()
    assert growth < 2 * arrays * nbytes, growth  # a leak would keep ~700 MB


@compiled
def test_realloc_keeps_alignment_and_contents() -> None:
    with interop.aligned_numpy():
        x = np.arange(10, dtype=np.float32)
        x.resize(100_000, refcheck=False)  # ndarray.resize reallocates through the handler
        grown = np.fromiter((float(i) for i in range(50_000)), np.float32)  # grows by realloc
        resized = np.resize(np.arange(7, dtype=np.float32), 20)
    assert multiarray.get_handler_name(grown) == ALIGNED and grown.ctypes.data % 64 == 0
    assert np.array_equal(grown, np.arange(50_000, dtype=np.float32))
    assert resized.ctypes.data % 64 == 0 and resized[7:14].tolist() == list(range(7))
    expected = np.arange(10, dtype=np.float32)
    assert x.ctypes.data % 64 == 0 and np.array_equal(x[:10], expected) and not x[10:].any()
    # after the block, the array's own handler (ours) still reallocates it: sizes that make
    # the C library move the block, and the data's offset in it
    for size in (3, 1_000_000, 17, 300_000, 5, 64, 2_000_003, 10):
        x.resize(size, refcheck=False)
        keep = min(size, 3)
        assert x.ctypes.data % 64 == 0, size
        assert np.array_equal(x[:keep], expected[:keep]), size
        assert multiarray.get_handler_name(x) == ALIGNED


@pytest.mark.parametrize("to", ["jax", "tensorflow"])
def test_explain_names_the_remedy_for_numpy_only(to: str) -> None:
    pytest.importorskip(to)
    x = np.ones(9, np.float32)[1:]  # 4 bytes past an allocation: off 64 bytes in any twin
    reasons = "; ".join(interop.explain(x, to).reasons)
    assert f"{to} shares only 64-byte aligned buffers on cpu and this one is 4-byte" in reasons
    assert "inside `with interop.aligned_numpy():`" in reasons
    assert "interop.set_aligned_numpy(True)" in reasons
    torch = pytest.importorskip("torch")
    t = torch.ones(9)[1:]
    assert "aligned_numpy" not in "; ".join(interop.explain(t, to).reasons)


def pure_twin_behaviour() -> list[str]:
    """What a pure-Python process does with the block and the switch."""
    import numpy

    said = []
    for attempt in (interop.aligned_numpy().__enter__, lambda: interop.set_aligned_numpy(True)):
        try:
            attempt()
        except interop.AlignedNumpyUnavailableError as exc:
            assert isinstance(exc, RuntimeError)
            said.append(str(exc))
    interop.set_aligned_numpy(False)
    said.append(multiarray.get_handler_name(numpy.ones(3)))
    return said


def test_pure_twin_refuses_naming_the_fix() -> None:
    with Worker(timeout=120, env={"INTEROP_PURE_PYTHON": "1"}) as child:
        said = child.call(pure_twin_behaviour).unwrap()
    assert len(said) == 3 and said[2] == DEFAULT
    for message in said[:2]:
        assert "needs interop's compiled accelerator" in message
        assert "pure Python (INTEROP_PURE_PYTHON is set)" in message
        assert "without it" in message and "build_ext --inplace" in message
    if not HAS_ALIGNED:  # this process is the pure twin too: the same, here
        assert pure_twin_behaviour() == said


@compiled
def test_benchmark_pairs_each_conversion_and_checks_what_it_times() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import aligned as bench

    result = bench.measure(rounds=2, batch_ns=1)
    measured = [t for t in bench.TARGETS if t not in result["skipped"]]
    assert [p["what"] for p in result["pairs"]] == ["np.ones"] + [f"→ {t}" for t in measured]
    assert all(p["default_us"] > 0 and p["aligned_us"] > 0 for p in result["pairs"])
    machine = {"date": "today", "cpu": "cpu", "cpus": 2, "python": "3", "git": "abc"}
    table = bench.markdown(result, machine)
    assert all(f"| → {t} |" in table for t in measured)
    if measured:  # a batch that is not shared is caught before anything is timed
        plain, _ = bench.batches(np, interop)
        with pytest.raises(RuntimeError, match="the aligned batch was not shared"):
            bench.check(measured[0], plain, plain)
