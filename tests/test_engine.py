"""The engine: one plan that explain prints and convert runs, the fast path, the hub object."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import interop
from interop.api import HUB
from interop.engine import Hub
from interop.plan import CopyAtSource, Export, Import, RouteChoice, WarmRoute
from interop.registry import REGISTRY, Registry
from interop.roles import FastPath
from interop.testing import explain_or_raise

np = pytest.importorskip("numpy")
HERE = Path(__file__).parent


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_the_engine_properties_hold_in_a_process_of_their_own():
    pytest.importorskip("hypothesis")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            str(HERE / "engine_properties.py"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    assert " passed" in out.stdout


def test_explain_describes_this_tensor_not_the_one_that_made_the_cached_plan():
    small = np.arange(12, dtype=np.float32).reshape(4, 3)[::-1]
    large = np.arange(3500, dtype=np.float32).reshape(70, 50)[::-1]
    pytest.importorskip("torch")
    interop.explain(small, "torch")
    text = str(interop.explain(large, "torch"))
    assert "[70, 50]" in text and "[4, 3]" not in text and "[-50, 1]" in text


def test_plans_are_typed_steps_run_in_order():
    pytest.importorskip("torch")
    plan = interop.explain(np.arange(6.0)[::-2], "torch")
    # (what a route remembered by an earlier test would do is said apart: not a step run)
    kinds = [type(s) for s in plan.steps if not isinstance(s, WarmRoute)]
    assert kinds == [Export, CopyAtSource, Import] and plan.copy_at == "source"
    HUB.trace = []
    try:
        y = interop.convert(np.arange(6.0)[::-2], "torch")
        assert [type(s) for s in HUB.trace] == kinds
    finally:
        HUB.trace = None
    assert y.tolist() == [5.0, 3.0, 1.0]


def test_explain_refuses_a_same_framework_move_convert_cannot_make():
    for call in (explain_or_raise, interop.convert):
        with pytest.raises(interop.DeviceError, match="cuda"):
            call(np.ones(3), "numpy", device="cuda:0")


def test_numpy_copies_a_numpy_capsule_when_asked_with_only_numpy_imported():
    out = run(
        """
        import sys, numpy as np, interop
        a = np.arange(6.0)
        b = interop.convert(a.__dlpack__(), "numpy", copy=True)
        assert b.tolist() == a.tolist() and b.ctypes.data != a.ctypes.data
        o = np.array([1, None], dtype=object)
        c = interop.convert(o, "numpy", copy=True)
        assert c.tolist() == [1, None] and c is not o
        print(sorted(m for m in ("torch", "jax", "tensorflow") if m in sys.modules))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_fast_path_is_remembered_and_keeps_the_answer():
    torch = pytest.importorskip("torch")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    HUB.routes.clear()
    first = interop.convert(a, "torch")
    assert "torch" in HUB.routes.table[np.ndarray]
    HUB.trace = []
    try:
        second = interop.convert(a, "torch")
        assert HUB.trace == []  # no plan ran: the route took it
    finally:
        HUB.trace = None
    assert second.data_ptr() == first.data_ptr() == a.ctypes.data
    assert isinstance(second, torch.Tensor) and second.sum().item() == 66.0


ROUTE_DANGER = """
import numpy as np, torch, interop
a = np.arange(12, dtype=np.float32).reshape(3, 4)
for _ in range(3):
    interop.convert(a, "torch")  # a route is learned from a canonical array
for view in (a[::-1], a[:, ::-1], a.T, a[::2], np.broadcast_to(a[:1], (3, 4))):
    t = interop.convert(view, "torch")
    assert t.tolist() == view.tolist(), view.strides
    float((t * 2).sum())  # torch's own kernels on the result
ro = a.copy(); ro.flags.writeable = False
t = interop.convert(ro, "torch"); t += 1
assert ro[0, 0] == 0
print("ok")
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_route_learned_from_one_layout_never_takes_another(pure):
    pytest.importorskip("torch")
    out = run(ROUTE_DANGER, INTEROP_PURE_PYTHON=pure)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_interop_list_says_which_path_is_active():
    out = run("from interop.cli import main; main(['list'])", INTEROP_PURE_PYTHON="1")
    assert out.returncode == 0, out.stderr
    assert "fast path: pure Python (INTEROP_PURE_PYTHON is set)" in out.stdout


def test_a_fresh_hub_is_independent_of_the_default_one():
    class Toy(interop.Adapter):
        name = "toy"
        modules = ("toy_fw",)
        contract = (1, 0)

        def capabilities(self):
            return interop.Capabilities(frozenset({"float32"}), frozenset({"float32"}))

    hub = Hub(Registry())
    hub.register(Toy())
    assert hub.registry.get("toy").name == "toy"
    with pytest.raises(interop.UnknownFrameworkError):
        HUB.registry.get("toy")
    assert hub.plans == {} and hub.routes.table == {}
    y = hub.convert(np.arange(3.0), "numpy", copy=True)
    assert y.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("flag", [1, 0, "yes", 1.0, np.int64(1)])
def test_copy_accepts_only_none_and_booleans(flag):
    a = np.arange(3.0)
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.InvalidArgumentError, match="copy must be") as info:
            call(a, "numpy", copy=flag)
        assert isinstance(info.value, TypeError)


def test_numpy_booleans_count_as_their_value_and_never_share_a_cache_slot():
    torch = pytest.importorskip("torch")
    a = np.arange(4.0)
    assert interop.convert(a, "torch", copy=np.True_).data_ptr() != a.ctypes.data
    assert interop.convert(a, "torch", copy=True).data_ptr() != a.ctypes.data
    assert interop.convert(a, "torch").data_ptr() == a.ctypes.data
    with pytest.raises(interop.CopyForbiddenError):
        interop.convert(a[::-1], "torch", copy=np.False_)
    assert isinstance(interop.convert(a[::-1], "torch"), torch.Tensor)


@pytest.mark.skipif(
    os.environ.get("INTEROP_REQUIRE_SPEEDUPS") != "1",
    reason="only where the build must have compiled the accelerator (CI sets it)",
)
def test_the_compiled_accelerator_is_built_and_active():
    assert HUB.routes.compiled and interop.api.accelerated().startswith("compiled")
    assert type(interop.convert).__name__ == "Front"


IMMUTABLE_ROUTE = """
import jax.numpy as jnp, torch, interop
from interop.api import HUB
x = jnp.arange(1000, dtype=jnp.float32)  # 64-bit dtypes are never routed (x64 can change)
for _ in range(3):
    interop.convert(x, "torch")
HUB.trace = []
y = interop.convert(x, "torch")
print(len(HUB.trace), y.data_ptr() == x.unsafe_buffer_pointer())
with interop.immutable_policy("copy"):
    z = interop.convert(x, "torch")
print(z.data_ptr() != x.unsafe_buffer_pointer())
"""


@pytest.mark.parametrize("policy", [None, "", "share", " Share "])
def test_immutable_sources_take_the_fast_path_under_the_share_policy(policy, monkeypatch):
    # the fast path compares the policy by identity: however it was spelled, it must match
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    monkeypatch.delenv("INTEROP_IMMUTABLE", raising=False)
    out = run(IMMUTABLE_ROUTE, **({} if policy is None else {"INTEROP_IMMUTABLE": policy}))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["0", "True", "True"], out.stdout


def test_a_misspelled_immutable_policy_warns_and_copies(monkeypatch):
    # "copyy" was taken for "share" in silence: what was meant to be copied was aliased
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    out = run(
        "import warnings; warnings.simplefilter('always')\n"
        "import jax.numpy as jnp, interop\n"
        "x = jnp.arange(1000, dtype=jnp.float32)\n"
        "y = interop.convert(x, 'torch')\n"
        "print(y.data_ptr() != x.unsafe_buffer_pointer(), float((y + 1).sum()))\n",
        INTEROP_IMMUTABLE="copyy",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "500500.0"], out.stdout
    assert "INTEROP_IMMUTABLE='copyy' is neither 'share' nor 'copy'" in out.stderr


def _counting_route(
    target: type, *, defer: bool = False, guards: tuple = (), source: type = object
) -> tuple[object, list[int]]:
    """A compiled route from a toy source whose exporter makes legacy counting capsules."""
    from interop import readonly
    from interop.speedups import SPEEDUPS
    from interop.testing import counting_capsule

    tokens: list[int] = []

    def export(x: object) -> object:
        capsule, token = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
        tokens.append(token)
        return capsule

    probe, _ = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
    known = {SPEEDUPS.fingerprint(probe): None}  # the importer is unused: the API imports
    del probe
    route = SPEEDUPS.Route(
        known=known,
        exporter=export,
        guards=guards,
        ranges=(),
        policy=readonly.current_policy,
        share=readonly.SHARE,
        source=source,
        export_api=None,
        import_api=target,  # the route imports through the target type's exchange API,
        versioned=False,
        as_object=False,
        guarded=False,
        bridge=1,  # which takes versioned capsules: the route boxes the legacy one first
        bridge_read_only=False,
        legacy_read_only_ok=False,
        defer=defer,
    )
    return route, tokens


PAYLOAD = np.arange(12, dtype=np.float32).tobytes()


@pytest.mark.skipif(not HUB.routes.compiled, reason="the compiled accelerator is not active")
def test_legacy_capsules_enter_exchange_api_targets_in_c_and_are_released_once():
    # JAX, TensorFlow and MXNet export legacy capsules only; torch and Paddle import versioned
    # ones through their C exchange API, so the route boxes the legacy capsule as versioned
    torch = pytest.importorskip("torch")
    from interop.testing import COUNTER

    route, tokens = _counting_route(torch.Tensor)
    assert route.exchange_api == (False, True)
    results = [route(object(), None) for _ in range(3)]
    for t in results:
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        assert (t * 2).sum().item() == 132.0 and t.shape == (3, 4)
    assert [COUNTER.released(k) for k in tokens] == [0, 0, 0]  # still held by torch
    t = results[0]
    t += 1  # torch writes the memory it was given
    assert t[0, 0].item() == 1.0
    del results, t
    assert [COUNTER.released(k) for k in tokens] == [1, 1, 1]


class _Toy:
    """A toy source whose `hazard()` answer is counted (a route guard's question)."""

    def __init__(self, hazard: bool) -> None:
        self.flag, self.asked = hazard, 0

    def hazard(self) -> bool:
        self.asked += 1
        return self.flag


@pytest.mark.skipif(not HUB.routes.compiled, reason="the compiled accelerator is not active")
@pytest.mark.parametrize("code", [2, 5], ids=["float guard", "complex guard"])
def test_a_guard_for_a_dtype_code_asks_only_exports_of_that_code(code):
    # torch's is_conj() is asked of complex tensors only (code 5), after the export; these
    # exports are float32 (code 2): a float guard refuses a hazard, a complex one never asks
    torch = pytest.importorskip("torch")
    from interop.testing import COUNTER

    guards = (("hazard", frozenset({False}), code),)
    route, tokens = _counting_route(torch.Tensor, guards=guards, source=_Toy)
    safe, hazardous = _Toy(False), _Toy(True)
    assert (route(safe, None) * 2).sum().item() == 132.0
    refused = route(hazardous, None)
    if code == 2:
        assert safe.asked == hazardous.asked == 1 and refused is None
        assert COUNTER.released(tokens[1]) == 1  # the refused export, released once
    else:
        assert safe.asked == hazardous.asked == 0 and refused is not None
    with pytest.raises(TypeError, match="dtype code"):
        _counting_route(torch.Tensor, guards=(("hazard", frozenset({False}), "complex"),))


@pytest.mark.skipif(not HUB.routes.compiled, reason="the compiled accelerator is not active")
def test_legacy_capsules_into_paddle_are_boxed_deferred_and_released_once():
    pytest.importorskip("interop_paddle")
    import interop_paddle

    paddle = interop_paddle.import_paddle()
    from interop.capsule import flush_deferred
    from interop.testing import COUNTER

    route, tokens = _counting_route(paddle.Tensor, defer=True)
    assert route.exchange_api == (False, True)
    results = [route(object(), None) for _ in range(3)]
    for y in results:
        assert float((y * 2).sum()) == 132.0 and list(y.shape) == [3, 4]
    del results, y
    flush_deferred()
    assert [COUNTER.released(k) for k in tokens] == [1, 1, 1]


@pytest.mark.parametrize("target", ["numpy", "jax", "tensorflow"])
def test_a_warm_route_never_takes_a_lazy_torch_view(target):
    # a neg or conj view exports the same capsule facts as a plain tensor: only the route's
    # guards (is_neg, is_conj, looked up once on torch.Tensor) keep its raw storage out
    torch = pytest.importorskip("torch")
    pytest.importorskip(target)
    adapter = HUB.registry.get(target)
    z = torch.tensor([1 + 2j, 3 - 4j, -5 + 6j, 7 + 8j])
    plain = torch.tensor([1.0, -2.0, 3.0, -4.0])
    for _ in range(3):  # the routes for float32 and complex64 tensors of this shape
        interop.convert(plain, target)
        interop.convert(z, target)
    assert target in HUB.routes.table[torch.Tensor]
    for view, resolved in (
        (torch._neg_view(plain), -plain),
        (z.conj().imag, -z.imag),
        (z.conj(), z.conj().resolve_conj()),
    ):
        try:
            y = interop.convert(view, target)
        except interop.UnsupportedDTypeError:  # (complex into a framework without it)
            continue
        except interop.UnsupportedTensorError as refused:  # a typed refusal naming the bit
            assert "conj" in str(refused) and view.is_conj()
            continue
        assert adapter.to_bytes(y) == resolved.numpy().tobytes(), (target, view)


def _fast_address_cases() -> list[tuple[str, object]]:
    """Every sample and view of every installed adapter with a cheap address whose
    fingerprint lets it onto a route (the only tensors the route asks the address of)."""
    from interop.testing import usable_adapters

    cases = []
    for adapter in usable_adapters():
        if type(adapter).fast_address is FastPath.fast_address:
            continue
        for shape in ((12,), (3, 4), (2, 3, 5)):
            x = adapter.sample("float32", shape)
            for name, view in {"whole": x, **adapter.views(x)}.items():
                if adapter.fingerprint(view) is not None:
                    cases.append((f"{adapter.name}-{shape}-{name}", view))
    return cases


def test_fast_addresses_are_where_the_first_element_is():
    # the pure route checks a target's alignment with it, before exporting: a wrong address
    # lets an unaligned buffer reach TensorFlow's kernels, or copies an aligned one for nothing
    cases = _fast_address_cases()
    assert any(name.startswith("numpy") for name, _ in cases)
    for name, x in cases:
        adapter = HUB.registry.detect(x)
        assert adapter.fast_address(x) == adapter.data_address(x), name


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_warm_route_into_tensorflow_copies_an_unaligned_array(compiled):
    pytest.importorskip("tensorflow")
    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    from interop.api import make_convert

    hub = Hub(HUB.registry, compiled=compiled)
    convert = make_convert(hub)
    tf_adapter = HUB.registry.get("tensorflow")
    raw = np.zeros(4 * 12 + 128, np.uint8)
    start = -raw.ctypes.data % 64
    for _ in range(3):  # learn the route on 64-byte aligned float32 arrays
        good = raw[start : start + 48].view(np.float32)
        assert tf_adapter.data_address(convert(good, "tensorflow")) == good.ctypes.data
    assert "tensorflow" in hub.routes.table[np.ndarray]
    for shift in (4, 16, 32):
        bad = raw[start + shift : start + shift + 48].view(np.float32)
        bad[...] = np.arange(12)
        y = convert(bad, "tensorflow")
        assert tf_adapter.data_address(y) != bad.ctypes.data, f"shared {shift} bytes off"
        assert tf_adapter.to_bytes(y) == bad.tobytes()


# --- remembered ranges --------------------------------------------------------------------------
def test_remembered_ranges_live_exactly_as_long_as_their_owners():
    import gc

    from interop.readonly import Ranges

    class Owner:
        pass

    ranges = Ranges()
    kept = [Owner() for _ in range(3)]
    assert not ranges and len(ranges) == 0
    for i, owner in enumerate(kept):
        assert ranges.add(1000 * i, 10, owner)
    assert ranges.add(5000, 10, kept[0])  # the same owner twice: two ranges, both remembered
    assert not ranges.add(9000, 10, b"bytes")  # no owner that can be weakly referenced
    for _ in range(1000):  # owners that die at once: their ranges go with them
        ranges.add(7000, 10, Owner())
    gc.collect()
    assert len(ranges) == 4 and ranges
    assert ranges.covers(5, 1) and ranges.covers(5005, 1) and ranges.covers(2009, 4)
    assert not ranges.covers(7000, 10) and len(ranges.entries) == 4
    del kept, owner
    gc.collect()
    assert not ranges and len(ranges) == 0 and not ranges.entries and not ranges._refs


# source, target, the steps its pure route must take, the steps it must not pay for
PURE_ROUTE_STEPS = [
    (
        "numpy",
        "torch",
        (),
        ("remembered", "block_policy", "& mask", "defer(", "Held", "unconsumed"),
    ),
    ("torch", "numpy", ("Held(capsule)",), ("remembered", "block_policy", "& mask", "defer(")),
    ("tensorflow", "torch", ("remembered or also", "block_policy()"), ("& mask", "defer(")),
    ("torch", "tensorflow", ("address(x) & mask",), ("remembered", "block_policy", "where(")),
    ("torch", "paddle", ("drain()",), ("remembered", "& mask")),
    ("paddle", "numpy", ("Held(capsule)",), ("remembered", "block_policy", "defer(")),
    # MXNet's capsules come without its Python destructor: the route releases what it keeps
    ("mxnet", "torch", ("unconsumed(capsule)", "except BaseException"), ("rebox", "Held")),
    ("mxnet", "numpy", ("unconsumed(capsule)", "Held(capsule)"), ("rebox", "where(")),
    ("tensorflow", "jax", ("where(capsule",), ("unconsumed",)),  # (no bare exports)
]


@pytest.mark.parametrize(("source", "target", "takes", "skips"), PURE_ROUTE_STEPS)
def test_a_pure_route_is_written_with_the_checks_its_pair_needs_and_no_others(
    source, target, takes, skips
):
    # the safety of a warm call rests on these lines: an immutable source into a writable
    # target tests the copy policy and the read-only memory, every import into a target that
    # frees under a lock (Paddle) is deferred and claims its address, TensorFlow's import
    # checks the alignment
    from interop.api import make_convert
    from interop.testing import usable_adapters

    names = {adapter.name: adapter for adapter in usable_adapters()}
    if source not in names or target not in names:
        pytest.skip(f"needs {source} and {target}")
    hub = Hub(HUB.registry, compiled=False)
    convert = make_convert(hub)
    x = names[source].sample("float32", (64, 64))
    for _ in range(2):
        convert(x, target)
    route = hub.routes.table[type(x)][target]
    if target == "paddle":  # re-wrapped by the accelerator where built, else boxed and
        # imported in one through Paddle's exchange API, in dygraph mode only
        from interop.speedups import SPEEDUPS

        takes += (
            ("capsule = defer(capsule)", "import_(capsule)")
            if SPEEDUPS is not None
            else ("if not import_ok():", "return adopt(capsule)")
        )
        skips += ("adopt(",) if SPEEDUPS is not None else ("defer(", "import_(")
    for line in takes:
        assert line in route.source, (line, route.source)
    for line in skips:
        assert line not in route.source, (line, route.source)


# --- pure routes over capsules without a destructor (FastPath.bare_exporter) ------------------
def _bare_route(importer):
    """A pure route whose exporter makes counting legacy capsules with no destructor (as
    MXNet's bare exporter does), and the tokens of what it exported."""
    from interop import capsule as cap
    from interop.fastpath.pure import pure_route
    from interop.testing import counting_capsule

    tokens = []

    def export(x):
        dressed, token = counting_capsule(PAYLOAD, "float32", (3, 4), versioned=False)
        tokens.append(token)
        address, _ = cap.pointer(dressed, False)
        cap.mark_used(dressed, False)  # its tensor now belongs to the bare capsule only
        return cap.new_capsule(address, False, 0)

    known = {"key": (export, importer)}
    route = pure_route(Hub(HUB.registry), "toy", lambda x: "key", known, False, True, 1,
                        False, None, (), bare=True)  # fmt: skip
    return route, tokens


def _refuse(holder):
    raise RuntimeError("refused before taking the capsule")


def _take_then_fail(holder):
    taken = np.from_dlpack(holder)  # consumed: NumPy owns the tensor now
    raise RuntimeError(f"failed after taking {taken.shape}")


def _interrupt(holder):
    raise KeyboardInterrupt


@pytest.mark.parametrize("importer", [_refuse, _take_then_fail], ids=["refused", "taken"])
def test_a_bare_capsule_the_importer_fails_on_is_released_once(importer):
    import gc

    from interop.testing import COUNTER

    route, tokens = _bare_route(importer)
    assert "unconsumed(capsule)" in route.source
    assert route(object(), None) is None  # the full path decides
    gc.collect()
    assert [COUNTER.released(t) for t in tokens] == [1]


def test_a_bare_capsule_taken_is_released_once_when_its_result_goes():
    from interop.testing import COUNTER

    route, tokens = _bare_route(np.from_dlpack)
    results = [route(object(), None) for _ in range(3)]
    assert [r.reshape(-1)[5] for r in results] == [5.0, 5.0, 5.0]
    assert (results[0] + results[1]).sum() == 132.0  # NumPy's kernels on the results
    assert [COUNTER.released(t) for t in tokens] == [0, 0, 0]
    del results
    assert [COUNTER.released(t) for t in tokens] == [1, 1, 1]


def test_a_bare_capsule_is_released_when_the_import_is_interrupted():
    from interop.testing import COUNTER

    route, tokens = _bare_route(_interrupt)
    with pytest.raises(KeyboardInterrupt):
        route(object(), None)
    assert [COUNTER.released(t) for t in tokens] == [1]


def test_bare_capsules_never_meet_a_bridge_a_re_wrap_or_the_full_path():
    from interop.fastpath.pure import bare_route, pure_route

    assert bare_route(None, None, None, False)
    assert not bare_route(print, None, None, False) and not bare_route(None, None, None, True)
    assert not bare_route(None, print, None, False) and not bare_route(None, None, print, False)
    with pytest.raises(AssertionError):  # a route that could drop such a capsule unreleased
        pure_route(Hub(HUB.registry), "toy", id, {}, False, False, 64, False, None, (),
                    bare=True)  # fmt: skip


# --- notes of what a target can do with a dtype --------------------------------------------------
#: per target: an op its kernels refuse on the wide unsigned dtypes (with the error its refusal
#: raises) and one the note says works, both through the framework's own API
KERNEL_GAPS = {
    "torch": (
        lambda t: t + t,
        NotImplementedError,
        lambda t: (t * 1).double().tolist(),
    ),
    "paddle": (
        lambda t: t.clone(),
        RuntimeError,
        lambda t: t.astype("float64").numpy().tolist(),
    ),
}


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
@pytest.mark.parametrize("target", sorted(KERNEL_GAPS))
def test_explain_says_which_kernels_a_target_lacks_for_a_dtype(target, dtype):
    refused, error, works = KERNEL_GAPS[target]
    missing = REGISTRY.get(target).unavailable()
    if missing:
        pytest.skip(missing)
    a = np.array([1, 2, 3, np.iinfo(dtype).max], dtype)
    notes = [n for n in interop.explain(a, target).notes if f"kernels for {dtype}" in n]
    assert len(notes) == 1, interop.explain(a, target)
    y = interop.convert(a, target)
    with pytest.raises(error):
        refused(y)  # what the note says: the framework's own kernels refuse it
    assert works(y) == a.astype("float64").tolist()  # and what it says works
    assert not [n for n in interop.explain(a.astype("int32"), target).notes if "kernel" in n]


# --- the warm path: a route replays the plan, never decides otherwise --------------------------
def _warm(compiled: bool) -> tuple[Hub, object]:
    """A fresh hub and its `convert` (compiled or pure routes), for routes learned in a test."""
    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    from interop.api import make_convert

    hub = Hub(HUB.registry, compiled=compiled)
    return hub, make_convert(hub)


def _replace_importer(hub: Hub, kind: type, to: str, compiled: bool, importer) -> None:
    """Every fingerprint the route (kind -> to) knows now imports with `importer`."""
    known = hub.routes._known[(kind, to)]
    for key, entry in known.items():
        known[key] = importer if compiled else (entry[0], importer)


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_keyboard_interrupt_in_a_warm_route_reaches_the_caller(compiled):
    # only an Exception sends a warm conversion to the full path: a KeyboardInterrupt (or
    # SystemExit) raised while the route runs is the user's, on the compiled route as on the pure
    torch = pytest.importorskip("torch")
    hub, convert = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    convert(x, "numpy")
    assert "numpy" in hub.routes.table[torch.Tensor]

    def interrupted(source):
        raise KeyboardInterrupt

    _replace_importer(hub, torch.Tensor, "numpy", compiled, interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert(x, "numpy")

    def exhausted(source):  # an Exception: the full path converts, as on the pure route
        raise MemoryError("importer")

    _replace_importer(hub, torch.Tensor, "numpy", compiled, exhausted)
    y = convert(x, "numpy")
    assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0


ROUTE_REREGISTERS = """
import gc, numpy as np, torch, interop
from interop.api import HUB
from interop_numpy import NumpyAdapter

class Rejoining(NumpyAdapter):
    '''NumPy's adapter whose fast-path exporter registers it again, which clears every route
    (the one running included) while the route that called it still runs.'''
    made = {}

    def exporter(self, versioned, writable, dtype):
        real = super().exporter(versioned, writable, dtype)
        key = (versioned, writable, dtype)
        if real is not None and key not in self.made:
            def export(x):
                interop.register(self, replace=True)
                gc.collect()
                return real(x)
            self.made[key] = export
        return self.made.get(key)

interop.register(Rejoining(), replace=True)
a = np.arange(12, dtype=np.float32).reshape(3, 4)
warm = 0
for _ in range(200):
    warm += "torch" in HUB.routes.table.get(np.ndarray, {})
    t = interop.convert(a, "torch")
    assert t.data_ptr() == a.ctypes.data and float((t + 1).sum()) == 78.0
print("ok", warm)
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_route_survives_the_routes_being_cleared_while_it_runs(pure):
    # interop.register clears the routes; a route that holds what it uses only through the
    # table (borrowed references) reads freed memory when it happens during its exporter
    pytest.importorskip("torch")
    out = run(ROUTE_REREGISTERS, INTEROP_PURE_PYTHON=pure, PYTHONMALLOC="debug")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", "100"]  # every other call took the route


def _freed_torch_tensor():
    """A torch tensor whose storage was freed as FSDP frees it: shape kept, no data."""
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t.untyped_storage().resize_(0)
    assert t.data_ptr() == 0 and t.shape == (3, 4)
    return t


@pytest.mark.parametrize("target", ["numpy", "jax", "tensorflow"])
@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_warm_route_refuses_a_torch_tensor_whose_storage_was_freed(compiled, target):
    # the plan refuses a NULL data pointer with elements; a route learned from an ordinary
    # tensor must not hand the freed one on (garbage, or a segfault on read)
    torch = pytest.importorskip("torch")
    if REGISTRY.get(target).unavailable():
        pytest.skip(REGISTRY.get(target).unavailable())
    with pytest.raises(interop.DLPackError, match="NULL|null") as planned:
        Hub(HUB.registry).convert(_freed_torch_tensor(), target)
    hub, convert = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for _ in range(2):
        convert(x, target)
    assert target in hub.routes.table[torch.Tensor]
    with pytest.raises(interop.DLPackError) as warm:
        convert(_freed_torch_tensor(), target)
    assert str(warm.value) == str(planned.value)


@pytest.mark.parametrize("hook", ["exporter", "importer"])
@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_fast_path_hook_that_fails_disables_its_route_not_the_conversion(
    compiled, hook, monkeypatch
):
    # routes are learned after the data moved: an adapter failing to give its fast-path entry
    # point (a private name a release removed) costs the route, never the conversion
    torch = pytest.importorskip("torch")
    adapter = HUB.registry.get("torch" if hook == "exporter" else "numpy")

    def broken(*args):
        raise AttributeError(f"{hook} is gone in this release")

    monkeypatch.setattr(type(adapter), hook, broken)
    hub, convert = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for _ in range(3):
        y = convert(x, "numpy")
        assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0
    assert "numpy" not in hub.routes.table.get(torch.Tensor, {})
    # the plan said so: the hook's failure is its reason for no route
    why = hub.explain(x, "numpy").route.why_not
    assert why.startswith("a fast-path hook failed (AttributeError") and hook in why


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_routes_replay_the_plans_route_choice_and_decide_nothing(compiled, monkeypatch):
    torch = pytest.importorskip("torch")
    hub, convert = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    plan = hub.explain(x, "numpy")
    assert plan.route.remembered and plan.route.why_not == ""
    for _ in range(2):
        convert(x, "numpy")
    entries = list(hub.routes._known[(torch.Tensor, "numpy")].values())
    if compiled:  # the route's exporter and each fingerprint's importer: the plan's
        assert hub.routes._built[(torch.Tensor, "numpy")].exporter is plan.route.exporter
        assert entries == [plan.route.importer]
    else:
        assert entries == [(plan.route.exporter, plan.route.importer)]
    # a plan that chooses no route teaches none, whatever the pair could do
    import interop.engine as engine

    monkeypatch.setattr(engine, "choose_route", lambda *a: RouteChoice("refused by this test"))
    hub, convert = _warm(compiled)
    for _ in range(3):
        y = convert(x, "numpy")
        assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0  # NumPy's kernels
    assert "numpy" not in hub.routes.table.get(torch.Tensor, {})
    assert hub.explain(x, "numpy").route.why_not == "refused by this test"


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_a_tensor_into_its_own_framework_is_returned_by_a_route(compiled):
    """The full path returns the tensor itself after planning (microseconds); the route it
    teaches returns it at once, for copy=None and copy=False. copy=True and device= still
    take the full path (fresh memory, the framework's own copy); a subclass is not keyed."""
    torch = pytest.importorskip("torch")
    hub, convert = _warm(compiled)
    a = np.arange(6.0)
    assert convert(a, "numpy") is a
    assert hub.routes.table[np.ndarray]["numpy"] is not None  # learned
    assert convert(a, "numpy") is a and convert(a, "numpy", copy=False) is a
    fresh = convert(a, "numpy", copy=True)
    assert not np.shares_memory(fresh, a) and (fresh + 1).sum() == 21.0  # NumPy's kernels
    t = torch.ones(2, requires_grad=True)  # passes as itself, as the full path passes it
    assert convert(t, "torch") is t and convert(t, "torch") is t
    assert convert(t, "pytorch") is t  # (an alias: its own key)
    p = torch.nn.Parameter(torch.ones(2))
    assert convert(p, "torch") is p and torch.nn.Parameter not in hub.routes.table
    moved = convert(torch.ones(2), "torch", device="cpu", copy=True)
    assert moved.data_ptr() != t.data_ptr() and float((moved * 2).sum()) == 4.0
    assert "numpy" not in hub.routes.table.get(torch.Tensor, {})  # (a pair of its own)


def test_the_plan_says_why_a_share_is_not_remembered():
    pytest.importorskip("torch")
    a = np.arange(12.0).reshape(3, 4)
    assert interop.explain(a, "torch").route.remembered
    assert interop.explain(a, "torch", copy=True).route.why_not == (
        "copy=True asks for fresh memory on every call"
    )
    assert "no adapter exports the source" in interop.explain(a.__dlpack__(), "torch").route.why_not
    assert interop.explain(a, "numpy").route.remembered  # the tensor itself: see below
    assert interop.explain(a, "numpy", copy=True).route.why_not == (
        "the same framework, copied or moved"
    )
    assert interop.explain(a, "torch", dtypes={"float64": "float32"}).route.why_not == (
        "a cast copies"
    )


TORCH_PRIVATE_EXPORT_RENAMED = """
import types, numpy as np, torch, torch._tensor, interop
from interop.api import HUB
# a torch release that renames its private export: Tensor.__dlpack__ (public) still works
torch._tensor._C = types.ModuleType("torch._C")
torch._tensor._C.__dict__.update(vars(torch._C))
del torch._C._to_dlpack_versioned
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
for _ in range(3):
    y = interop.convert(x, "numpy")
    assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0
    y = interop.convert(x, "jax")
    assert y.unsafe_buffer_pointer() == x.data_ptr() and float((y + 1).sum()) == 78.0
print(sorted(HUB.routes.table[torch.Tensor]))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_conversions_out_of_torch_survive_a_renamed_private_export(pure):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    out = run(TORCH_PRIVATE_EXPORT_RENAMED, INTEROP_PURE_PYTHON=pure)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['jax', 'numpy']"  # both routes learned


JAX_DELETED_UNDER_A_RESULT = """
import sys, numpy as np, torch, jax, jax.numpy as jnp, interop
from interop.api import HUB
target = sys.argv[1]
for _ in range(3):  # the route is learned
    interop.convert(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), target)
assert target in HUB.routes.table[type(jnp.zeros(2))]
for _ in range(3):
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) + 1
    y = interop.convert(x, target)
    x.delete()  # as through the public __dlpack__: the result keeps the buffer alive
    assert float(y.sum()) == 78.0 and float((y + 1).sum()) == 90.0
    del y
print("ok")
"""


@pytest.mark.parametrize("target", ["numpy", "torch"])
@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_a_jax_array_deleted_while_a_warm_result_lives_is_as_through_dlpack(pure, target):
    # a route's cheaper entry point must keep the public call's lifetime semantics: XLA's
    # export of the array itself makes `x.delete()` abort ("Check failed: holds_[i] == 0")
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-c", JAX_DELETED_UNDER_A_RESULT, target],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "INTEROP_PURE_PYTHON": pure},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])
def test_routes_do_not_pile_up_for_adapter_objects_made_per_call(compiled):
    # `to=` an Adapter instance made afresh each call taught a route per instance, never
    # dropped (+14 MB compiled, +67 MB pure per 2*10^4 calls); the registered one still learns
    torch = pytest.importorskip("torch")
    from interop_numpy import NumpyAdapter

    hub, convert = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for _ in range(200):
        y = convert(x, NumpyAdapter())
        assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0
    assert len(hub.routes.table.get(torch.Tensor, {})) == 0
    assert len(hub.routes._known) == 0
    registered = HUB.registry.get("numpy")
    for _ in range(2):
        y = convert(x, registered)
    assert list(hub.routes.table[torch.Tensor]) == [registered]
    assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0


WARM_DIFFERENTIAL = r"""
import sys, numpy as np, torch, interop
from interop.api import HUB, make_convert
from interop.engine import Hub

targets = [t for t in sys.argv[1].split(",") if not HUB.registry.get(t).unavailable()]
compiled = HUB.routes.compiled


def freed():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t.untyped_storage().resize_(0)
    return t


def aligned(a):
    # `a` copied 64-byte aligned: where an array's address falls would otherwise decide some
    # plans (JAX and TensorFlow share aligned buffers only) from one call to the next
    return HUB.registry.get("numpy").copy(a)


def read_only():
    a = aligned(np.arange(12, dtype=np.float32).reshape(3, 4))
    a.flags.writeable = False
    return a


def unaligned():
    raw = np.zeros(4 * 12 + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 4
    a = raw[start : start + 48].view(np.float32).reshape(3, 4)
    a[...] = np.arange(12).reshape(3, 4)
    return a


def consumed():
    c = np.arange(12, dtype=np.float32).__dlpack__()
    np.from_dlpack(type("Once", (), {"__dlpack__": lambda s, **k: c,
                                     "__dlpack_device__": lambda s: (1, 0)})())
    return c


class Refusing:
    def __dlpack__(self, **kwargs):
        raise RuntimeError("this producer refuses")

    def __dlpack_device__(self):
        return (1, 0)


grid = aligned(np.arange(12, dtype=np.float32).reshape(3, 4))


def tgrid():
    return torch.arange(12.0).reshape(3, 4)


T, N = (lambda: torch.ones(3, 4)), (lambda: aligned(np.ones((3, 4), np.float32)))
CASES = {  # name: (a tensor of the same type to learn with, the hostile input)
    "torch-freed-storage": (T, freed),
    "torch-zero-size": (T, lambda: torch.zeros(0, 4)),
    "torch-0d": (T, lambda: torch.tensor(3.0)),
    "torch-transposed": (T, lambda: tgrid().T),
    "torch-step-sliced": (T, lambda: tgrid()[:, ::2]),
    "torch-negated": (T, lambda: tgrid()._neg_view()),
    "torch-conjugated": (lambda: tgrid() * 1j, lambda: (tgrid() * (1 + 2j)).conj()),
    "numpy-read-only": (N, read_only),
    "numpy-negative-strides": (N, lambda: grid[::-1]),
    "numpy-unaligned": (N, unaligned),
    "numpy-zero-size": (N, lambda: np.zeros((0, 4), np.float32)),
    "numpy-zero-size-aligned": (N, lambda: aligned(np.zeros((0, 4), np.float32))),
    "numpy-11-dimensions": (N, lambda: aligned(np.ones((2,) * 11, np.float32))),
    "numpy-0d": (N, lambda: aligned(np.array(3.0, np.float32))),
    "numpy-non-contiguous": (N, lambda: grid[:, ::2]),
    "capsule-consumed": (lambda: np.ones(3, np.float32).__dlpack__(), consumed),
    "dlpack-raises": (lambda: np.ones(3, np.float32), Refusing),
}


def outcome(convert, make, target):
    x = make()
    try:
        y = convert(x, target)
    except BaseException as exc:
        return ("raises", type(exc).__name__)
    adapter = HUB.registry.get(target)
    source = HUB.registry.detect(x)
    shares = source is not None and adapter.data_address(y) == source.data_address(x)
    adapter.exercise(y)  # its own kernels on the result
    return ("gives", adapter.to_bytes(y), shares)


hubs = {"pure": Hub(HUB.registry, compiled=False)}
if compiled:
    hubs["compiled"] = Hub(HUB.registry, compiled=True)
warm = {name: make_convert(hub) for name, hub in hubs.items()}
wrong = []
for name, (ordinary, hostile) in CASES.items():
    for target in targets:
        if name.startswith(target):
            continue  # the same framework: no DLPack, no route
        expected = outcome(Hub(HUB.registry).convert, hostile, target)  # planned, no route
        for path, convert in warm.items():
            for _ in range(2):
                try:
                    convert(ordinary(), target)  # learns the route (a plain share)
                except interop.InteropError:  # (MXNet holds no complex: nothing to learn)
                    pass
            got = [outcome(convert, hostile, target)]
            # a hostile input whose plan copies may teach a route itself: replayed, it and
            # the ordinary tensors after it still meet their plans' fates
            got += [outcome(convert, hostile, target) for _ in range(2)]
            again = ordinary()  # (the same tensor: its address's alignment decides some plans)
            same = (lambda: again) if hasattr(again, "__dlpack__") else ordinary  # (capsules: once)
            usual = outcome(Hub(HUB.registry).convert, same, target)
            after = outcome(convert, same, target)
            if got != [expected] * 3 or after != usual:
                brief = lambda o: o if o[0] == "raises" else (o[0], hash(o[1]), "shares" * o[2])
                wrong.append(
                    f"{name} -> {target} ({path}): {[brief(o) for o in got]} then "
                    f"{brief(after)}, planned {brief(expected)} then {brief(usual)}"
                )
print("\n".join(wrong) or "ok")
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled-if-built", "pure"])
def test_hostile_inputs_meet_the_same_fate_planned_and_on_both_warm_routes(pure):
    # the warm path replays the plan: whatever the plan does with an input (a typed error, a
    # copy, a share), the pure and compiled routes learned from ordinary tensors do the same
    pytest.importorskip("torch")
    targets = "numpy,torch,jax,tensorflow,paddle,mxnet"
    out = subprocess.run(
        [sys.executable, "-c", WARM_DIFFERENTIAL, targets],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "INTEROP_PURE_PYTHON": pure},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1].startswith("ok"), out.stdout[-4000:]


def test_explain_says_when_a_remembered_route_takes_the_call():
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    HUB.routes.clear()
    cold = interop.explain(x, "numpy")  # the plan chose the route this call teaches
    assert cold.route.remembered and cold.route.exporter is not None
    # in a user's words; the functions a route calls are named in details() only
    assert "convert remembers this plan as a route, taken by later" in str(cold), cold
    assert cold.route.names not in str(cold) and cold.route.names in cold.details()
    interop.convert(x, "numpy")
    warm = interop.explain(x, "numpy")
    text = warm.details()
    assert "_to_dlpack" not in str(warm) and "__" not in str(warm), warm
    kind, export = (
        ("compiled", "torch.Tensor.__dlpack_c_exchange_api__")
        if HUB.routes.compiled
        else ("pure Python", "torch._C._to_dlpack_versioned")
    )
    assert (
        f"convert takes the route remembered for torch.Tensor -> 'numpy' ({kind}), "
        f"replaying this plan without planning again ({export} -> numpy.from_dlpack)" in text
    ), text
    HUB.trace = []
    try:  # and it does: no plan runs
        y = interop.convert(x, "numpy")
        assert HUB.trace == []
    finally:
        HUB.trace = None
    assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0
    # a transposed view shares too, on the route: compiled keys hold the capsule's layout
    # class, pure ones torch's fingerprint's
    interop.convert(x.T, "numpy")
    text = str(interop.explain(x.T, "numpy"))
    assert "convert takes the route remembered for torch.Tensor" in text, text
    assert "route" not in str(interop.explain(x, "numpy", copy=True))


def test_import_errors_are_declared_builtin_exceptions_and_refusals_pickle():
    import pickle

    from interop.adapter import Capabilities
    from interop.errors import typed

    dtypes = frozenset({"float32"})
    for bad in ((KeyboardInterrupt,), (interop.InteropError,), ValueError, ("ValueError",)):
        with pytest.raises(interop.AdapterError, match="Capabilities.import_errors"):
            Capabilities(export_dtypes=dtypes, import_dtypes=dtypes, import_errors=bad)
    caps = Capabilities(export_dtypes=dtypes, import_dtypes=dtypes, import_errors=(ValueError,))
    assert caps.import_errors == (ValueError,)
    kind = typed(interop.UnsupportedDTypeError, ValueError)
    err = pickle.loads(pickle.dumps(kind("no float8 here")))
    assert type(err) is kind and str(err) == "no float8 here"
    assert isinstance(err, (ValueError)) and isinstance(err, interop.UnsupportedDTypeError)
    assert type(err).__name__ == "UnsupportedDTypeError"


@pytest.mark.parametrize("device", [None, "cuda"])
def test_an_uninstalled_target_is_framework_not_installed_before_any_device_advice(device):
    from interop.registry import REGISTRY

    if REGISTRY.get("cupy").installed():
        pytest.skip("cupy is installed here")
    for call in (interop.convert, explain_or_raise):
        with pytest.raises(interop.FrameworkNotInstalledError, match="cupy is not installed"):
            call(np.ones(3), "cupy", device=device)


@pytest.mark.parametrize("shape", [(1,), (1, 784), (4, 1, 3), (1, 1)])
def test_a_batch_of_one_takes_the_fast_path_in_both_twins(shape: tuple[int, ...]) -> None:
    """NumPy arrays with an extent-1 dimension (a batch of one) are keyed when their strides are
    exactly row-major: their warm calls run no step of the full path (the pure twin planned
    every call of them, 23-60 µs). One whose extent-1 stride is odd (NumPy still calls it
    C-contiguous) is told apart: a different plan (contiguous, not canonical) is its own."""
    torch = pytest.importorskip("torch")
    hub = Hub(REGISTRY)
    convert = interop.api.calls(hub).convert  # the fast path's front, then the full path
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    convert(x, "torch")
    hub.trace = []
    y = convert(x, "torch")
    assert hub.trace == []  # the remembered route, not the full path
    assert y.data_ptr() == x.ctypes.data and torch.equal(y * 1, torch.from_numpy(x.copy()))
    odd = np.lib.stride_tricks.as_strided(
        x, shape, tuple(8 if n == 1 else s for n, s in zip(shape, x.strides, strict=True))
    )
    assert odd.flags.c_contiguous and odd.strides != x.strides
    numpy = REGISTRY.get("numpy")
    assert numpy.fingerprint(odd) != numpy.fingerprint(x)
    z = convert(odd, "torch")
    assert torch.equal(z + 0, torch.from_numpy(x.copy()))


@pytest.mark.parametrize(
    "view", ["transposed", "column slice", "step slice", "channels_last", "expanded"]
)
def test_a_view_that_is_not_row_major_takes_the_fast_path_in_both_twins(view: str) -> None:
    """Transposes, slices and channels_last tensors (torch into NumPy, and back as NumPy
    views) are keyed by their layout class: warm calls run no step of the full path (the pure
    twin planned every call of them, 31-51 µs), they share as the plan said, and a view of
    another layout class, or a row-major tensor, is keyed apart."""
    torch = pytest.importorskip("torch")
    hub = Hub(REGISTRY)
    convert = interop.api.calls(hub).convert
    base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    x = {
        "transposed": base[0, 0].T,
        "column slice": base[0, 0][:, :3],
        "step slice": base[0, :, ::2],
        "channels_last": base.to(memory_format=torch.channels_last),
        "expanded": base[0, 0, :1].expand(6, 5),
    }[view]
    assert not x.is_contiguous()
    for tensor, to in ((x, "numpy"), (x.numpy(), "torch")):
        convert(tensor, to)
        hub.trace = []
        y = convert(tensor, to)
        assert hub.trace == []  # the remembered route, not the full path
        plan = hub.explain(tensor, to)
        if to == "numpy":
            values, shared = np.add(y, 0), y.ctypes.data == x.data_ptr()
        else:
            values, shared = (y + 0).numpy(), y.data_ptr() == tensor.ctypes.data
        assert (values == x.numpy()).all() and shared == plan.zero_copy, plan
        adapter = hub.registry.detect(tensor)
        row_major = tensor.contiguous() if to == "numpy" else np.ascontiguousarray(tensor)
        assert adapter.fingerprint(tensor) not in (None, adapter.fingerprint(row_major))


@pytest.mark.parametrize("shape", [(1,), (1, 784), (4, 1, 3)])
def test_a_torch_batch_of_one_takes_the_fast_path_in_both_twins(shape: tuple[int, ...]) -> None:
    """The same for torch tensors, which torch calls contiguous whatever the strides of their
    extent-1 dimensions (the pure twin planned every call of them, 26 µs)."""
    torch = pytest.importorskip("torch")
    hub = Hub(REGISTRY)
    convert = interop.api.calls(hub).convert
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    convert(x, "numpy")
    hub.trace = []
    y = convert(x, "numpy")
    assert hub.trace == []
    assert y.ctypes.data == x.data_ptr() and (np.add(y, 0) == x.numpy()).all()
    odd = x.as_strided(
        shape, tuple(7 if n == 1 else s for n, s in zip(shape, x.stride(), strict=True))
    )
    assert odd.is_contiguous() and odd.stride() != x.stride()
    adapter = REGISTRY.get("torch")
    assert adapter.fingerprint(odd) not in (None, adapter.fingerprint(x))
    assert (np.add(convert(odd, "numpy"), 0) == x.numpy()).all()


@pytest.mark.parametrize(
    "dtype",
    ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64"],
)
def test_a_numpy_scalar_converts_as_numpys_0d_array_by_its_route(dtype: str) -> None:
    """A NumPy scalar stands for a 0-d array (the NumPy adapter's `StandIns` role): explained
    and converted as NumPy's, and warm calls take the 0-d array's route (through its
    `__array_interface__` it planned every call, 30-40 µs). The result is a tensor of its own,
    used by torch's kernels; the immutable scalar is never written."""
    pytest.importorskip("torch")
    hub = Hub(REGISTRY)
    convert = interop.api.calls(hub).convert
    scalar = np.array(1, dtype=dtype)[()]  # a NumPy scalar (`np.generic`) of that dtype
    assert isinstance(scalar, np.generic) and not isinstance(scalar, np.ndarray)
    plan = interop.api.explain_through(interop.api.calls(hub), scalar, "torch")
    assert plan.source == "numpy" and "__array_interface__" not in str(plan), plan
    convert(scalar, "torch")
    hub.trace = []
    y = convert(scalar, "torch")
    assert hub.trace == []  # the 0-d array's remembered route, not the full path
    assert y.shape == () and str(y.dtype) == f"torch.{dtype}"
    assert (y + y).item() == (scalar + scalar).item()  # torch's kernel on it
    y.fill_(0)
    assert scalar == 1 and convert(scalar, "torch").item() == 1
    back = convert(scalar, "numpy")
    assert type(back) is np.ndarray and back.shape == () and back.dtype == scalar.dtype
    fresh = Hub(REGISTRY)  # its full path, called directly, teaches the 0-d array's route
    assert fresh.convert(scalar, "torch").item() == scalar.item()
    assert list(fresh.routes.table) == [np.ndarray] and "torch" in fresh.routes.table[np.ndarray]


def test_numpy_scalars_without_a_dlpack_dtype_are_refused_typed() -> None:
    """Scalars NumPy's own DLPack cannot carry are not stood in for: the generic protocol's
    refusal names their element type, as before."""
    for scalar, words in ((np.str_("ab"), "'<U2'"), (np.datetime64("2020-01-01"), "'<M8[D]'")):
        with pytest.raises(interop.UnsupportedDTypeError, match=re.escape(words)):
            interop.convert(scalar, "numpy")
