"""Copying plans remembered as routes: the plan decides (every tensor a route's key stands for
is copied the same way), the routes, compiled and pure, replay the source's own copy and then
convert the copy through its own route."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from interop.api import HUB, make_convert
from interop.engine import Hub
from interop.errors import CopyForbiddenError

np = pytest.importorskip("numpy")

BOTH = pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])


def warm(compiled: bool) -> tuple[Hub, object]:
    """A fresh hub (its own plans and routes) and its `convert`."""
    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    hub = Hub(HUB.registry, compiled=compiled)
    return hub, make_convert(hub)


def in_process(code: str, **env: str) -> str:
    """What `code` prints, run in a process of its own (an abort fails one test only)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def read_only(n: int = 12) -> object:
    a = np.arange(n, dtype=np.float32).reshape(-1, 4)
    a.flags.writeable = False
    return a


def served_by_routes(hub: Hub, convert, x, to: str):
    """convert(x, to) once the routes are warm, with no plan run (the hub's trace stays
    empty): the result."""
    for _ in range(3):  # the copy's plan, then the copy's own share, are learned
        convert(x, to)
    hub.trace = []
    try:
        result = convert(x, to)
        assert hub.trace == [], hub.trace  # no step of a plan ran: routes took it all
    finally:
        hub.trace = None
    return result


@BOTH
def test_a_read_only_array_reaches_torch_as_a_copy_on_a_remembered_route(compiled):
    torch = pytest.importorskip("torch")
    hub, convert = warm(compiled)
    a = read_only()
    plan = hub.explain(a, "torch")
    assert not plan.zero_copy and plan.route.remembered, plan.route
    assert plan.route.copier == hub.registry.get("numpy").copy
    t = served_by_routes(hub, convert, a, "torch")
    entries = hub.routes._known[(np.ndarray, "torch")]
    replays = [hub.routes.fast.replay_of(e) is not None for e in entries.values()]
    assert sorted(replays) == [False, True]  # the read-only key copies, the copy's key shares
    # fresh, writable memory holding the values, as the plan's copy gives
    assert isinstance(t, torch.Tensor) and t.data_ptr() != a.ctypes.data
    assert t.tolist() == a.tolist() and t.is_contiguous()
    t += 1  # torch's own kernels write it; the read-only source is untouched
    assert float((t * 2).sum()) == 2 * (66.0 + 12) and a[0, 0] == 0
    assert convert(a, "torch").data_ptr() != convert(a, "torch").data_ptr()  # a copy each call
    said = hub.routes.explain(a, "torch", None, None, None, plan)
    assert said is not None and "the copy converts through its own route" in str(said)
    assert said.detail == "interop_numpy.NumpyAdapter.copy copies", said


@BOTH
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)], ids=["0-d", "1", "1x1"])
def test_a_one_element_tensorflow_tensor_reaches_torch_as_a_copy_on_a_remembered_route(
    compiled, shape
):
    # TF hands out one buffer for all equal scalar constants: a writable torch alias could
    # change them all, so the plan copies; its key holds that the tensor has one element
    tf = pytest.importorskip("tensorflow")
    torch = pytest.importorskip("torch")
    hub, convert = warm(compiled)
    tfa = hub.registry.get("tensorflow")
    x = tf.constant(np.full(shape, 7.0, np.float32))
    plan = hub.explain(x, "torch")
    assert not plan.zero_copy and plan.route.remembered, plan.route
    t = served_by_routes(hub, convert, x, "torch")
    assert t.data_ptr() != tfa.data_address(x) and tuple(t.shape) == shape
    t.add_(1)  # torch's kernels write the copy; TF's cached constant keeps its value
    assert float(t.sum()) == 8.0 and float(tf.reduce_sum(tf.constant(np.float32(7.0)))) == 7.0
    assert float(tf.reduce_sum(x)) == 7.0
    grid = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))  # more elements: shared
    for _ in range(3):
        g = convert(grid, "torch")
        assert g.data_ptr() == tfa.data_address(grid) and float(torch.sum(g)) == 66.0


@BOTH
def test_copy_false_is_refused_and_copy_true_copies_after_a_copy_is_remembered(compiled):
    pytest.importorskip("torch")
    hub, convert = warm(compiled)
    a = read_only()
    served_by_routes(hub, convert, a, "torch")
    with pytest.raises(CopyForbiddenError, match="read-only"):
        convert(a, "torch", copy=False)
    fresh = convert(a, "torch", copy=True)
    assert fresh.data_ptr() != a.ctypes.data and fresh.tolist() == a.tolist()


@BOTH
@pytest.mark.parametrize("first", ["share", "copy"])
def test_shares_and_copies_of_one_pair_each_keep_their_own_plan(compiled, first):
    pytest.importorskip("torch")
    hub, convert = warm(compiled)
    writable = np.arange(12, dtype=np.float32).reshape(3, 4)
    ro = read_only()
    order = [writable, ro] if first == "share" else [ro, writable]
    for _ in range(3):
        for x in order:
            t = convert(x, "torch")
            shares = t.data_ptr() == x.ctypes.data
            assert shares == x.flags.writeable, (x.flags.writeable, first)
            assert t.tolist() == x.tolist() and float((t + 1).sum()) == 78.0
    replays = {
        key: hub.routes.fast.replay_of(e) is not None
        for key, e in hub.routes._known[(np.ndarray, "torch")].items()
    }
    assert set(replays.values()) == {False, True}  # share keys, and the read-only copy's


@BOTH
def test_a_reversed_view_is_keyed_by_its_layout_in_both_twins(compiled):
    # compiled keys pack the capsule's layout class, NumPy's fingerprint the array's: the
    # copy (torch takes no negative strides) is remembered
    torch = pytest.importorskip("torch")
    hub, convert = warm(compiled)
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = grid[::-1]
    t = served_by_routes(hub, convert, view, "torch")
    assert t.tolist() == view.tolist() and t.data_ptr() != view.ctypes.data
    assert torch.equal(t.flip(0), torch.from_numpy(grid))
    grid[0, 0] = 100  # a copy: the view's change is not seen
    assert t[-1, 0].item() == 0


def unaligned(dtype=np.float32):
    """A writable array whose data is 4 bytes past a 64-byte boundary."""
    raw = np.zeros(4 * 12 + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 4
    a = raw[start : start + 48].view(dtype).reshape(3, 4)
    a[...] = np.arange(12).reshape(3, 4)
    return a


@BOTH
def test_a_copy_that_depends_on_the_data_address_is_keyed_apart_from_aligned_tensors(compiled):
    # TensorFlow shares 64-byte aligned buffers and copies others first: both twins' keys
    # hold whether the address is as aligned as that (compiled: the capsule's alignment;
    # pure: the adapter's fast address), so the copy and the share are both remembered
    tf = pytest.importorskip("tensorflow")
    hub, convert = warm(compiled)
    tfa = hub.registry.get("tensorflow")
    off, aligned = unaligned(), np.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    aligned = hub.registry.get("numpy").copy(aligned)  # (64-byte aligned)
    plan = hub.explain(off, "tensorflow")
    assert not plan.zero_copy and plan.route.remembered, plan.route
    y = served_by_routes(hub, convert, off, "tensorflow")
    assert tfa.data_address(y) != off.ctypes.data and float(tf.reduce_sum(y * 2)) == 132.0
    for _ in range(3):  # and an aligned array of the same fingerprint still shares
        z = convert(aligned, "tensorflow")
        assert tfa.data_address(z) == aligned.ctypes.data and float(tf.reduce_sum(z)) == 66.0
    y = served_by_routes(hub, convert, off, "tensorflow")  # and the unaligned one still copies
    assert tfa.data_address(y) != off.ctypes.data and float(tf.reduce_sum(y)) == 66.0


def test_a_copy_the_immutable_policy_decides_is_planned_every_call():
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    import interop

    hub, convert = warm(HUB.routes.compiled)
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    tfa = hub.registry.get("tensorflow")
    with interop.immutable_policy("copy"):
        plan = hub.explain(x, "torch")
        assert not plan.zero_copy
        assert plan.route.why_not == (
            "the copy depends on the immutable policy, which its key leaves out"
        )
        for _ in range(3):
            t = convert(x, "torch")
            assert t.data_ptr() != tfa.data_address(x) and float(t.sum()) == 66.0
    t = convert(x, "torch")  # the share policy again: shared, as its plan says
    assert t.data_ptr() == tfa.data_address(x)


@BOTH
def test_a_copy_asked_by_memory_the_core_remembers_is_planned_every_call(compiled):
    # a JAX array over read-only NumPy memory the core shared is copied into torch (whose
    # tensors are writable); its key cannot say so (the core's memory is left out of keys),
    # so the copy is not remembered, and a JAX array of the same key still shares
    jax = pytest.importorskip("jax")
    pytest.importorskip("torch")
    hub, convert = warm(compiled)
    a = hub.registry.get("numpy").copy(np.arange(12, dtype=np.float32).reshape(3, 4))
    a.flags.writeable = False  # (64-byte aligned: JAX shares it)
    j = convert(a, "jax")
    assert j.unsafe_buffer_pointer() == a.ctypes.data
    plan = hub.explain(j, "torch")
    assert not plan.zero_copy
    assert plan.route.why_not == (
        "the copy depends on whether the core remembers the memory as read-only, "
        "which its key leaves out"
    )
    for _ in range(3):
        t = convert(j, "torch")
        assert t.data_ptr() != a.ctypes.data and float(t.sum()) == 66.0
    fresh = jax.numpy.arange(12, dtype=jax.numpy.float32).reshape(3, 4)
    t = convert(fresh, "torch")
    assert t.data_ptr() == fresh.unsafe_buffer_pointer() and float(t.sum()) == 66.0


@BOTH
def test_a_failing_copier_sends_the_call_to_the_full_path_and_an_interrupt_through(
    compiled, monkeypatch
):
    pytest.importorskip("torch")
    from interop_numpy import NumpyAdapter

    failure: list[BaseException] = []
    copy = NumpyAdapter.copy

    def flaky(self, x):
        if failure:
            raise failure[0]
        return copy(self, x)

    monkeypatch.setattr(NumpyAdapter, "copy", flaky)
    hub, convert = warm(compiled)
    a = read_only()
    served_by_routes(hub, convert, a, "torch")
    failure.append(RuntimeError("the copier fails"))
    t = convert(a, "torch")  # the full path's plan copies with NumPy's host copy instead
    assert t.tolist() == a.tolist() and t.data_ptr() != a.ctypes.data
    t += 1
    failure[:] = [KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        convert(a, "torch")


RELEASED_ONCE = """
import gc, sys, tracemalloc
import numpy as np, torch, interop
from interop.api import HUB
a = np.arange(1 << 20, dtype=np.float32).reshape(-1, 4)  # 4 MiB
a.flags.writeable = False
for _ in range(3):
    interop.convert(a, "torch")
assert any(HUB.routes.fast.replay_of(e) for e in HUB.routes._known[(np.ndarray, "torch")].values())
refs = sys.getrefcount(a)
tracemalloc.start()
for _ in range(100):
    t = interop.convert(a, "torch")
    assert float(t[-1, -1]) == (1 << 20) - 1
    del t
gc.collect()
held = tracemalloc.get_traced_memory()[0]
print(sys.getrefcount(a) - refs, held < (1 << 22))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_remembered_copy_releases_the_source_export_and_each_copy_once(pure):
    # the capsule exported to key the tensor is released (no reference to the source is
    # left), and each copy is freed with its result (4 MiB x 100 would otherwise pile up)
    pytest.importorskip("torch")
    assert in_process(RELEASED_ONCE, INTEROP_PURE_PYTHON=pure).split() == ["0", "True"]


@BOTH
def test_numpy_copies_a_transposed_torch_tensor_for_tensorflow_on_a_remembered_route(compiled):
    # the plan copies with NumPy over torch's memory (faster than torch's own copy): the
    # route replays that copy (both twins' keys hold the layout class)
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("tensorflow")
    hub, convert = warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    plan = hub.explain(x.T, "tensorflow")
    assert not plan.zero_copy and plan.route.remembered, plan.route
    assert "interop_numpy.NumpyAdapter.host_copy copies" in str(plan.route)
    y = served_by_routes(hub, convert, x.T, "tensorflow")
    tfa = hub.registry.get("tensorflow")
    assert tfa.data_address(y) != x.data_ptr() and y.numpy().tolist() == x.T.tolist()
    assert float(tf.reduce_sum(tf.matmul(y, tf.ones((3, 1))))) == 66.0  # TF's own kernels
    x[0, 0] = 100  # a copy: the change is not seen
    assert float(y[0, 0]) == 0.0
    bf16 = hub.explain(x.T.to(torch.bfloat16), "tensorflow")
    assert bf16.route.why_not == "numpy has no route copier for a bfloat16 tensor"


TORCH_RELEASED_ONCE = """
import sys
import numpy as np, torch, tensorflow as tf, interop
x = torch.arange(1 << 20, dtype=torch.float32).reshape(-1, 4)
for _ in range(3):
    interop.convert(x.T, "tensorflow")
print(interop.explain(x.T, "tensorflow").steps[0])
refs = sys.getrefcount(x)
for _ in range(100):
    y = interop.convert(x.T, "tensorflow")
    assert float(y[-1, -1]) == (1 << 20) - 1
    del y
print(sys.getrefcount(x) - refs, x._version)
"""


def test_numpys_copy_of_torch_memory_releases_the_export_it_read():
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    if not HUB.routes.compiled:
        pytest.skip("pure keys hold contiguous torch tensors only: no route to replay")
    first, counts = in_process(TORCH_RELEASED_ONCE).strip().splitlines()[-2:]
    assert "takes the route remembered for torch.Tensor -> 'tensorflow'" in first
    assert counts.split() == ["0", "0"]


@BOTH
def test_an_empty_read_only_array_is_copied_by_a_plan_on_every_call(compiled):
    # compiled keys tell empty arrays apart (pure ones key none): a tensor without elements
    # is planned per call whether its plan shares or copies, so both twins run the plan
    hub, convert = warm(compiled)
    empty = read_only(0)
    assert empty.shape == (0, 4)
    plan = hub.explain(empty, "torch")
    assert not plan.route.remembered and "no elements" in str(plan.route), plan.route
    for _ in range(3):
        convert(empty, "torch")
    hub.trace = []
    try:
        y = convert(empty, "torch")
        assert hub.trace, "a remembered route took it"
    finally:
        hub.trace = None
    assert tuple(y.shape) == (0, 4) and y.is_contiguous() and float((y + 1).sum()) == 0.0
