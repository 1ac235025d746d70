"""Soak and threads: memory growth per conversion for every pair, and conversions from threads.

Memory: for each ordered pair, a worker process converts N fresh 8 KB tensors with the
frameworks' own DLPack calls, then N with `interop.convert`, then N natively again, reading
its resident set size (RSS) after each phase. What the frameworks grow by on their own
(allocator arenas, caches) is the larger of the two native phases; `interop.convert` may grow
beyond that by less than 1 MB per 10^5 conversions (the target), and by less than 1 MB
at all for short runs, which a leaked tensor (8 KB a conversion) exceeds several times over.

Threads: 8 threads convert fresh tensors with values of their own between random pairs and
check every result through the target's own read-back; afterwards no bridged tensor is left.

CI sizes: 500 conversions a phase, 8 × 300 conversions from threads. Long runs:
`INTEROP_SOAK_CONVERSIONS=100000 INTEROP_SOAK_THREAD_CONVERSIONS=10000` (`tox -e soak`);
`INTEROP_SOAK_REPORT=path` appends a Markdown table of the figures.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import sys
import threading
import time
from typing import Any

import pytest

import interop
from interop import capsule as cap
from interop.registry import REGISTRY
from interop.testing.isolation import Worker
from interop.testing.suite import usable_adapters

np = pytest.importorskip("numpy")

CONVERSIONS = int(os.environ.get("INTEROP_SOAK_CONVERSIONS", "500"))
THREAD_CONVERSIONS = int(os.environ.get("INTEROP_SOAK_THREAD_CONVERSIONS", "300"))
REPORT = os.environ.get("INTEROP_SOAK_REPORT", "")
MB = 1 << 20
ELEMENTS = 2048  # float32: 8 KB a tensor, so that one leaked per conversion shows at once

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="reads the resident set size from /proc"
)


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- the frameworks' own calls, and tensors made by their own constructors --------------------
def make(name: str, values: Any) -> Any:
    """A fresh tensor of framework `name` holding a copy of a NumPy array."""
    if name == "numpy":
        return values.copy()
    if name == "torch":
        import torch

        return torch.tensor(values)
    if name == "jax":
        import jax.numpy as jnp

        return jnp.array(values)
    if name == "tensorflow":
        import tensorflow as tf

        return tf.constant(values)
    if name == "mxnet":
        from interop_mxnet import import_mxnet

        return import_mxnet().nd.array(values, dtype=values.dtype)
    if name == "paddle":
        from interop_paddle import import_paddle

        return import_paddle().to_tensor(values)
    if name == "mlx":
        import mlx.core as mx

        return mx.array(values)
    raise AssertionError(f"no constructor for {name}: add one here")


class _Capsule:
    """Hands a legacy capsule to importers that take objects only (NumPy, JAX)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def native(source: str, target: str, x: Any) -> Any:
    """`x` converted with the frameworks' own DLPack calls only."""
    if source == "tensorflow":
        import tensorflow as tf

        exported: Any = tf.experimental.dlpack.to_dlpack(x)
    elif source == "paddle":
        exported = x.__dlpack__()  # its __dlpack_device__ gives JAX a device id of None
    elif source == "mxnet":
        exported = sys.modules["mxnet"].nd.to_dlpack_for_write(x)
    else:
        exported = x
    is_capsule = cap.is_capsule(exported)
    if target in ("tensorflow", "mxnet", "jax") and not is_capsule:
        exported = exported.__dlpack__()  # legacy capsules: all these importers take
    if target in ("numpy", "jax") and cap.is_capsule(exported):
        exported = _Capsule(exported)
    if target == "numpy":
        return np.from_dlpack(exported)
    if target == "torch":
        import torch

        return torch.from_dlpack(exported)
    if target == "jax":
        import jax.dlpack

        return jax.dlpack.from_dlpack(exported).block_until_ready()
    if target == "tensorflow":
        import tensorflow as tf

        return tf.experimental.dlpack.from_dlpack(exported)
    if target == "mxnet":
        from interop_mxnet import import_mxnet

        return import_mxnet().nd.from_dlpack(exported)
    if target == "paddle":
        from interop_paddle import import_paddle

        return import_paddle().from_dlpack(exported)
    if target == "mlx":
        import mlx.core as mx

        return mx.from_dlpack(exported)
    raise AssertionError(target)


def _settle(*names: str) -> None:
    gc.collect()
    syncs = [getattr(REGISTRY.get(name), "synchronize", None) for name in names]
    for sync in filter(None, syncs):
        sync()  # MXNet frees on its engine
    if any(syncs):
        gc.collect()


# --- memory growth per pair, in a worker --------------------------------------------------------
def growth(source: str, target: str, conversions: int) -> dict[str, int]:
    """RSS growth (bytes) of each phase: native, interop twice, native again, after a warm-up.

    Interop's figure is the smaller of its two phases: a leak grows both, while a one-off
    step of the allocator (4.3 MB once in a few runs of numpy -> tensorflow under TF's
    minimum version, never twice) lands in one."""
    values = np.arange(ELEMENTS, dtype=np.float32)

    def run(convert: Any, count: int) -> None:
        for i in range(count):
            x = make(source, values + i)
            y = convert(x)
            del x, y

    def through_interop(x: Any) -> Any:
        return interop.convert(x, target)

    def natively(x: Any) -> Any:
        return native(source, target, x)

    run(natively, 100)
    run(through_interop, 100)
    # What exists now (the frameworks' modules, earlier pairs' objects) is never garbage this
    # measurement is about: frozen, each collection of `_settle` scans only the new objects
    # (~0.3 s a collection less in a worker that imported every framework).
    gc.collect()
    gc.freeze()
    marks = []
    for convert in (natively, through_interop, through_interop, natively):
        _settle(source, target)
        marks.append(rss())
        run(convert, conversions)
    _settle(source, target)
    marks.append(rss())
    first, mine, again, second = (after - before for before, after in itertools.pairwise(marks))
    return {"native": max(first, second), "interop": min(mine, again), "conversions": conversions}


def _pairs() -> list[tuple[str, str]]:
    names = [a.name for a in usable_adapters()]
    return [(s, d) for s in names for d in names if s != d]


@pytest.fixture(scope="module")
def worker():
    with Worker(timeout=max(300, CONVERSIONS // 100)) as shared:
        yield shared


@pytest.fixture(scope="module")
def report():
    rows: list[str] = []
    yield rows
    if REPORT and rows:
        with open(REPORT, "a") as out:
            out.write(f"\n{CONVERSIONS} conversions a phase, 8 KB float32 tensors\n\n")
            out.write("| pair | native growth | interop growth | beyond native per 10^5 |\n")
            out.write("|---|---|---|---|\n")
            out.writelines(rows)


@pytest.mark.parametrize("pair", _pairs(), ids="-".join)
def test_memory_growth_beyond_the_frameworks_own(worker, report, pair):
    source, target = pair
    figures = worker.call(growth, source, target, CONVERSIONS).unwrap()
    beyond = figures["interop"] - max(figures["native"], 0)
    per_100k = beyond * 100_000 / CONVERSIONS
    report.append(
        f"| {source} -> {target} | {figures['native'] / MB:.2f} MB | "
        f"{figures['interop'] / MB:.2f} MB | {per_100k / MB:.2f} MB |\n"
    )
    limit = max(MB * CONVERSIONS / 100_000, MB)
    assert beyond < limit, (
        f"{source} -> {target}: interop.convert grew RSS by {figures['interop'] / MB:.2f} MB "
        f"over {CONVERSIONS} conversions, the frameworks' own calls by "
        f"{figures['native'] / MB:.2f} MB ({per_100k / MB:.1f} MB per 10^5 beyond them)"
    )


# --- threads ------------------------------------------------------------------------------------
def eight_threads(one: Any, more: Any) -> tuple[list[str], int]:
    """`one(k, i)` for i = 0, 1, ... while `more(i)`, on each of 8 threads k at once: (what
    failed, one line a thread, and how many calls returned)."""
    errors: list[str] = []
    done = [0] * 8

    def work(k: int) -> None:
        try:
            while more(done[k]):
                one(k, done[k])
                done[k] += 1
        except BaseException as exc:  # reported with the others
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}"[:400])

    pool = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return errors, sum(done)


def threads(names: list[str], per_thread: int, seed: int) -> dict[str, Any]:
    """8 threads, each converting `per_thread` fresh tensors between random pairs of `names`,
    every result checked through the target's own read-back."""
    for name in names:  # import every framework before the threads start
        make(name, np.zeros(2, np.float32))
    rngs = [random.Random(seed + k) for k in range(8)]

    def one(k: int, i: int) -> None:
        source, target = rngs[k].sample(names, 2)
        values = np.arange(12, dtype=np.float32).reshape(3, 4) + (k * 100_000 + i)
        y = interop.convert(make(source, values), target)
        got = REGISTRY.get(target).to_bytes(y)
        assert got == values.tobytes(), f"{source} -> {target}: wrong values"

    started = time.monotonic()
    errors, done = eight_threads(one, lambda i: i < per_thread)
    _settle(*names)
    return {
        "errors": errors,
        "conversions": done,
        "seconds": time.monotonic() - started,
        "live_bridges": cap.live_bridges(),
    }


THREAD_SETS = {
    "all-frameworks": lambda names: names,
    "without-paddle": lambda names: [n for n in names if n != "paddle"],
}


@pytest.mark.parametrize("which", list(THREAD_SETS))
def test_eight_threads_convert_between_random_pairs(which):
    names = THREAD_SETS[which]([a.name for a in usable_adapters()])
    if which == "without-paddle" and len(names) == len(usable_adapters()):
        pytest.skip("paddle is not installed here: the other case covers these frameworks")
    if len(names) < 2:
        pytest.skip("fewer than two frameworks installed here")
    with Worker(timeout=max(60, THREAD_CONVERSIONS // 10)) as fresh:  # 8 × 300: seconds
        result = fresh.call(threads, names, THREAD_CONVERSIONS, 9).unwrap()
    assert not result["errors"], "\n".join(result["errors"])
    assert result["conversions"] == 8 * THREAD_CONVERSIONS
    assert result["live_bridges"] == 0, f"{result['live_bridges']} bridged tensors never freed"


def paddle_imports_from_threads(seconds: float) -> int:
    """8 threads convert torch tensors into Paddle and use them, for `seconds`."""
    import torch
    from interop_paddle import import_paddle

    paddle = import_paddle()
    stop = time.monotonic() + seconds

    def one(k: int, i: int) -> None:
        x = torch.arange(12.0).reshape(3, 4) + k
        y = interop.convert(x, "paddle")
        assert float(paddle.sum(y.reshape([12]))) == float(x.sum())

    errors, done = eight_threads(one, lambda i: time.monotonic() < stop)
    assert not errors, "\n".join(errors)
    return done


def test_paddle_takes_tensors_from_eight_threads():
    """Found by the threads soak: Paddle runs a producer's deleter (torch's, which takes the
    GIL) while holding its own deleter lock, and paddle.from_dlpack takes that lock holding
    the GIL; from two threads that deadlocks within seconds (measured: 3 runs out of 3)."""
    names = [a.name for a in usable_adapters()]
    if not {"paddle", "torch"} <= set(names):
        pytest.skip("needs paddle and torch")
    with Worker(timeout=30) as fresh:  # it takes seconds; a deadlock fails it at 30
        assert fresh.call(paddle_imports_from_threads, 3.0).unwrap() > 0


# --- chains through a framework that frees under a lock, from threads -------------------------
#: chains of hops from eight threads, each result read back and dropped (issue 52): Paddle runs
#: the deleters of memory it imported holding a lock its import takes with the GIL held, so a
#: release that waits for the GIL under that lock (a consumer freeing Paddle's own capsule
#: without the GIL: MXNet, torch) deadlocked the pure twin every time
CHAINS = [
    ("numpy", "paddle", "mxnet"),
    ("numpy", "paddle", "torch"),
    ("torch", "paddle", "mxnet"),
    ("mxnet", "paddle", "numpy", "paddle"),
]


def chains_from_threads(chain: tuple[str, ...], per_thread: int) -> dict[str, Any]:
    """8 threads each take `per_thread` fresh tensors along `chain`, reading every hop back
    through the target's own API and dropping the results."""
    for name in chain:
        make(name, np.zeros(2, np.float32))

    def one(k: int, i: int) -> None:
        values = np.arange(12, dtype=np.float32) + (k * 100_000 + i)
        x = make(chain[0], values)
        for target in chain[1:]:
            x = interop.convert(x, target)
            got = REGISTRY.get(target).to_bytes(x)
            assert got == values.tobytes(), f"-> {target}: wrong values"

    errors, done = eight_threads(one, lambda i: i < per_thread)
    _settle(*chain)
    return {"errors": errors, "done": done, "live_bridges": cap.live_bridges()}


@pytest.mark.parametrize("chain", CHAINS, ids="->".join)
def test_chains_through_paddle_from_eight_threads_finish(chain):
    names = {a.name for a in usable_adapters()}
    if not set(chain) <= names:
        pytest.skip(f"needs {', '.join(sorted(set(chain) - names))}")
    with Worker(timeout=60) as fresh:  # seconds; a deadlock fails it at 60
        result = fresh.call(chains_from_threads, chain, THREAD_CONVERSIONS).unwrap()
    assert not result["errors"], "\n".join(result["errors"])
    assert result["done"] == 8 * THREAD_CONVERSIONS
    assert result["live_bridges"] == 0, f"{result['live_bridges']} bridged tensors never freed"


# --- fork while the releasing thread is busy ----------------------------------------------------
def fork_while_releasing(target: str) -> dict[str, Any]:
    """Two releases deferred out of `target` queued, the releasing thread busy with one of
    them (its owner's release sleeps), torch -> `target` conversions running in another
    thread: then fork. In the child: a conversion, the queued release that the parent's
    thread had not reached, and the exit handlers, timed."""
    import atexit

    import torch

    released: list[str] = []
    buffers = {name: np.full(6, float(i + 1), np.float32) for i, name in enumerate("ab")}

    def on_release(name: str) -> Any:
        def run() -> None:
            released.append(name)
            time.sleep(1.0)  # (the GIL released: the thread is busy, the process is not)

        return run

    held = [
        interop.convert(
            cap.capsule_over(a.ctypes.data, a.shape, (1,), "float32", a, on_release=on_release(n)),
            target,
        )
        for n, a in buffers.items()
    ]
    stop, wrong = threading.Event(), []

    def convert_on() -> None:
        while not stop.is_set():
            x = torch.arange(12.0) + 7
            if REGISTRY.get(target).to_bytes(interop.convert(x, target)) != x.numpy().tobytes():
                wrong.append("wrong values in the parent")

    converting = threading.Thread(target=convert_on)
    converting.start()
    del held  # both releases queued: the thread takes one and sleeps in it
    deadline = time.monotonic() + 10
    while not released and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never return
        code = 1
        try:
            values = np.arange(12, dtype=np.float32) + 3
            back = interop.convert(interop.convert(values.copy(), target), "numpy")
            interop.capsule.flush_deferred(timeout=20)
            gc.collect()
            atexit._run_exitfuncs()  # (what the interpreter's exit runs: the core's stop)
            ok = back.tobytes() == values.tobytes() and sorted(released) == ["a", "b"]
            code = 0 if ok else 3
        finally:
            os._exit(code)
    status = None
    while time.monotonic() - started < 30:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        status = os.waitpid(pid, 0)[1]
    stop.set()
    converting.join()
    interop.capsule.flush_deferred()
    return {
        "child_exit": None if status is None else os.waitstatus_to_exitcode(status),
        "child_seconds": round(time.monotonic() - started, 2),
        "parent_released": sorted(released),
        "wrong": wrong[:1],
    }


@pytest.mark.parametrize("target", ["paddle"])
def test_a_child_forked_while_releases_run_releases_the_rest_and_exits_at_once(target):
    """After fork the child's releasing machinery starts clean: no thread to wait for, the
    parent's thread's queue released in the child, and the exit takes no 10 s wait for it."""
    names = {a.name for a in usable_adapters()}
    if not {target, "torch"} <= names:
        pytest.skip(f"needs {target} and torch")
    with Worker(timeout=60) as fresh:
        result = fresh.call(fork_while_releasing, target).unwrap()
    assert result["child_exit"] == 0, result
    # the child sleeps 1 s in the release it runs; a thread left busy would add 10 s at exit
    assert result["child_seconds"] < 6, result
    assert result["parent_released"] == ["a", "b"], result
    assert not result["wrong"], result


def warm_differential_from_threads(chain: tuple[str, ...], per_thread: int) -> list[str]:
    """8 threads take fresh tensors along `chain` three ways at once: planned (a fresh hub per
    call: no route), and warm on pure and (where built) compiled routes; each hop's values and
    sharing must be the plan's. What differs, or fails, is returned."""
    from interop.api import HUB, make_convert
    from interop.engine import Hub

    for name in chain:
        make(name, np.zeros(2, np.float32))
    warm = {"pure": make_convert(Hub(HUB.registry, compiled=False))}
    if HUB.routes.compiled:
        warm["compiled"] = make_convert(Hub(HUB.registry, compiled=True))
    wrong: list[str] = []

    def fate(convert: Any, x: Any, target: str) -> tuple[Any, tuple[bytes, bool]]:
        y = convert(x, target)
        into, source = REGISTRY.get(target), REGISTRY.detect(x)
        assert source is not None
        return y, (into.to_bytes(y), into.data_address(y) == source.data_address(x))

    def one(k: int, i: int) -> None:
        values = np.arange(12, dtype=np.float32) + (k * 100_000 + i)
        xs = {path: make(chain[0], values) for path in ("planned", *warm)}
        for target in chain[1:]:
            xs["planned"], planned = fate(Hub(HUB.registry).convert, xs["planned"], target)
            assert planned[0] == values.tobytes(), f"-> {target}: wrong values"
            for path, convert in warm.items():
                # the plan for this very tensor: whether Paddle still holds an import of its
                # address (a release pending in another thread) is the address's own story
                shares = Hub(HUB.registry).explain(xs[path], target).zero_copy
                xs[path], got = fate(convert, xs[path], target)
                if got != (planned[0], shares):
                    wrong.append(f"{path} -> {target}: shares {got[1]}, plan {shares}")

    errors, _ = eight_threads(one, lambda i: i < per_thread)
    _settle(*chain)
    return (errors + wrong)[:5]


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
@pytest.mark.parametrize("chain", CHAINS[:3], ids="->".join)
def test_warm_routes_from_eight_threads_give_what_plans_give(chain, pure):
    """The warm differential from threads: routes learned and taken by eight threads at once
    along a chain through Paddle decide nothing a plan would not (nor hang)."""
    names = {a.name for a in usable_adapters()}
    if not set(chain) <= names:
        pytest.skip(f"needs {', '.join(sorted(set(chain) - names))}")
    with Worker(timeout=120, env={"INTEROP_PURE_PYTHON": pure}) as fresh:
        wrong = fresh.call(warm_differential_from_threads, chain, 50).unwrap()
    assert not wrong, "\n".join(wrong)


# --- a framework's first use, from threads at once ------------------------------------------------
def first_conversions_from_threads(target: str) -> list[str]:
    """8 threads convert NumPy arrays into `target`, which this process has not imported, all
    at once: the first imports it, the others must wait for that import, not use the module
    it half built (paddle: "partially initialized module 'paddle' has no attribute 'Tensor'")."""
    assert REGISTRY.get(target).modules[0] not in sys.modules, "imported already"
    gate = threading.Barrier(8)

    def one(k: int, i: int) -> None:
        if i == 0:
            gate.wait()
        values = np.arange(12, dtype=np.float32) + (k * 100 + i)
        y, own = interop.convert(values, target), native("numpy", target, values.copy())
        # (Paddle's mode is its importing thread's: a thread that did not import it may make
        # DenseTensors, its own import too)
        assert type(y) is type(own), f"a {type(y)}, where its own import makes a {type(own)}"
        assert np.asarray(y).tobytes() == values.tobytes(), "wrong values"

    return eight_threads(one, lambda i: i < 3)[0]


@pytest.mark.parametrize("target", ["paddle", "torch"])
def test_a_first_conversion_from_eight_threads_at_once_waits_for_the_import(target):
    if target not in {a.name for a in usable_adapters()}:
        pytest.skip(f"needs {target}")
    with Worker(timeout=120) as fresh:
        errors = fresh.call(first_conversions_from_threads, target).unwrap()
    assert not errors, "\n".join(errors)
