"""Routes are built from the plan's steps alone (issue 49, part 3): a plan whose steps are
edited (`dataclasses.replace`) is followed by the full path and by the route learned from it,
in both twins, so no twin works out again what a step says."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import interop
import interop.capsule as cap
import interop.engine as engine
from interop.api import HUB, make_convert
from interop.engine import Hub
from interop.errors import ReadOnlyMemoryError
from interop.plan import Bridge, Import, Plan, Rewrap

np = pytest.importorskip("numpy")
TWINS = pytest.mark.parametrize("compiled", [False, True], ids=["pure", "compiled"])


def _warm(compiled: bool) -> tuple[Hub, Any, list[int]]:
    """A fresh hub, its `convert`, and a list that grows by one for each call it plans."""
    if compiled and not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    hub = Hub(HUB.registry, compiled=compiled)
    planned: list[int] = []
    plan = hub.plan

    def counted(*args: Any, **kwargs: Any) -> Plan:
        planned.append(1)
        return plan(*args, **kwargs)

    hub.plan = counted  # type: ignore[method-assign]
    return hub, make_convert(hub), planned


def _edit(monkeypatch: pytest.MonkeyPatch, target: str, edit: Callable[[Plan], Plan]) -> None:
    """Every plan into `target` that `negotiate` makes from now on, edited by `edit`."""
    real = engine.negotiate

    def negotiate(*args: Any, **kwargs: Any) -> Plan:
        plan = real(*args, **kwargs)
        return edit(plan) if plan.target == target else plan

    monkeypatch.setattr(engine, "negotiate", negotiate)


def _before_import(plan: Plan, step: Any) -> Plan:
    at = next(i for i, s in enumerate(plan.steps) if isinstance(s, Import))
    return replace(plan, steps=(*plan.steps[:at], step, *plan.steps[at:]))


def _released() -> None:
    gc.collect()
    cap.flush_deferred()


@TWINS
@pytest.mark.parametrize("edited", [False, True], ids=["as-planned", "edited"])
def test_a_route_follows_a_rewrap_step_edited_into_its_plan(compiled, edited, monkeypatch):
    """torch frees imports under no lock of its own: its plans have no re-wrap, and a route
    claims no address. A plan edited to defer and claim is followed on the warm route: the
    array's address is claimed while the torch tensor lives (the twins used to derive the
    re-wrap from the target's capabilities instead)."""
    torch = pytest.importorskip("torch")
    if edited:
        rewrap = Rewrap("core", "edited in by this test", defer=True, claim=True)
        _edit(monkeypatch, "torch", lambda plan: _before_import(plan, rewrap))
    hub, convert, planned = _warm(compiled)
    a = np.arange(12, dtype=np.float32)
    first = convert(a, "torch")
    assert cap.address_claimed(a.ctypes.data) is edited  # the full path ran the plan's steps
    del first
    _released()
    assert not cap.address_claimed(a.ctypes.data)
    assert planned == [1] and (np.ndarray in hub.routes.table)
    t = convert(a, "torch")
    assert planned == [1], "the warm route gave the call back"
    assert t.data_ptr() == a.ctypes.data and float((t + 1).sum()) == 78.0  # torch's kernels
    assert isinstance(t, torch.Tensor)
    assert cap.address_claimed(a.ctypes.data) is edited
    del t
    _released()
    assert not cap.address_claimed(a.ctypes.data)


@TWINS
@pytest.mark.parametrize("edited", [False, True], ids=["as-planned", "edited"])
def test_a_route_follows_a_bridge_step_edited_into_its_plan(compiled, edited, monkeypatch):
    """torch -> numpy shares a versioned capsule, which NumPy makes a writable array of. A
    plan edited to bridge it into a legacy capsule (which NumPy marks read-only) is followed
    by the full path and by the warm route."""
    torch = pytest.importorskip("torch")
    if edited:
        bridge = Bridge("core", "edited in by this test", versioned=False)
        _edit(monkeypatch, "numpy", lambda plan: _before_import(plan, bridge))
    _, convert, planned = _warm(compiled)
    x = torch.arange(12, dtype=torch.float32)
    for call in (1, 2):
        y = convert(x, "numpy")
        assert y.ctypes.data == x.data_ptr() and (y + 1).sum() == 78.0  # NumPy's kernels
        assert y.flags.writeable is not edited
        assert planned == [1], f"call {call} was planned again"


def test_the_full_path_reads_a_bridges_read_only_permission_off_the_step(monkeypatch):
    """A read-only array reaches TensorFlow (which never writes what it imports) through a
    legacy capsule, which cannot say read-only: the plan's Bridge allows it. Edited to forbid
    it, the conversion is refused as the bridge refuses it, naming why."""
    pytest.importorskip("tensorflow")
    block = np.zeros(6 + 16, dtype=np.float32)  # (TensorFlow shares 64-byte aligned memory)
    start = (-block.ctypes.data % 64) // 4
    a = block[start : start + 6]
    a[:] = np.arange(6)
    a.flags.writeable = False
    hub, convert, _ = _warm(False)
    (bridge,) = [s for s in hub.explain(a, "tensorflow").steps if isinstance(s, Bridge)]
    assert not bridge.versioned and bridge.legacy_read_only_ok
    assert convert(a, "tensorflow").numpy().tolist() == a.tolist()

    def forbid(plan: Plan) -> Plan:
        steps = tuple(
            replace(s, legacy_read_only_ok=False) if isinstance(s, Bridge) else s
            for s in plan.steps
        )
        return replace(plan, steps=steps)

    _edit(monkeypatch, "tensorflow", forbid)
    _, convert, _ = _warm(False)
    with pytest.raises(ReadOnlyMemoryError, match="only takes legacy DLPack capsules"):
        convert(a, "tensorflow")


@TWINS
@pytest.mark.parametrize("guarded", [False, True], ids=["as-planned", "edited"])
def test_a_route_is_guarded_by_the_immutable_policy_where_its_plan_says(
    compiled, guarded, monkeypatch
):
    """NumPy arrays are writable, so numpy -> torch routes ignore the immutable policy. A
    route choice edited to be guarded gives calls back to the full path while the policy is
    'copy' (which plans them: NumPy's memory is still shared)."""
    pytest.importorskip("torch")
    real = engine.choose_route
    monkeypatch.setattr(
        engine, "choose_route", lambda *a, **k: replace(real(*a, **k), guarded=guarded)
    )
    hub, convert, planned = _warm(compiled)
    a = np.arange(12, dtype=np.float32)
    assert hub.explain(a, "torch").route.guarded is guarded
    planned.clear()
    convert(a, "torch")
    convert(a, "torch")
    assert planned == [1]  # learned, then taken
    with interop.immutable_policy("copy"):
        t = convert(a, "torch")
    assert t.data_ptr() == a.ctypes.data
    assert planned == [1, 1] if guarded else planned == [1]
