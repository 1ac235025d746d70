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
from interop.plan import Bridge, Export, Import, Plan, Rewrap

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


@TWINS
@pytest.mark.parametrize("edited", [False, True], ids=["as-planned", "edited"])
def test_a_route_checks_the_dimensions_its_plans_import_step_bounds(compiled, edited, monkeypatch):
    """torch holds tensors of any number of dimensions, and a 1-d and a 2-d array have the
    same key. An Import step edited to hold one dimension at most is what the route checks:
    the 2-d array then takes the full path (it is planned), the 1-d one the route."""
    torch = pytest.importorskip("torch")
    if edited:

        def bounded(plan: Plan) -> Plan:
            steps = [replace(s, max_ndim=1) if isinstance(s, Import) else s for s in plan.steps]
            return replace(plan, steps=tuple(steps))

        _edit(monkeypatch, "torch", bounded)
    hub, convert, planned = _warm(compiled)
    copy = hub.registry.get("numpy").copy  # (64-byte aligned both: compiled keys hold it)
    flat, grid = copy(np.arange(12, dtype=np.float32)), copy(np.arange(12.0, dtype=np.float32))
    grid = grid.reshape(3, 4)
    for _ in range(2):
        t = convert(flat, "torch")
        assert t.data_ptr() == flat.ctypes.data and float(torch.cumsum(t, 0)[-1]) == 66.0
    assert planned == [1]
    t = convert(grid, "torch")
    assert t.data_ptr() == grid.ctypes.data and float(t.sum(dim=1)[2]) == 38.0
    assert len(planned) == (2 if edited else 1)


def test_a_pure_route_checks_the_alignment_its_plans_import_step_asks(monkeypatch):
    """torch shares any address: its pure route reads none. An Import step edited to ask for
    64 bytes gives a route that reads the adapter's fast address (and keys unaligned arrays
    apart)."""
    pytest.importorskip("torch")
    for edited in (False, True):
        if edited:

            def aligned(plan: Plan) -> Plan:
                steps = [
                    replace(s, alignment=64) if isinstance(s, Import) else s for s in plan.steps
                ]
                return replace(plan, steps=tuple(steps))

            _edit(monkeypatch, "torch", aligned)
        hub, convert, _ = _warm(False)
        convert(np.arange(12, dtype=np.float32), "torch")
        route = hub.routes.table[np.ndarray]["torch"]
        assert ("address(x) & mask" in route.source) is edited, route.source


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


def _edited(step_type: type, **fields: Any) -> Callable[[Plan], Plan]:
    """An edit giving each step of `step_type` in a plan these `fields`."""

    def edit(plan: Plan) -> Plan:
        steps = tuple(replace(s, **fields) if type(s) is step_type else s for s in plan.steps)
        return replace(plan, steps=steps)

    return edit


def _tensor(framework: str) -> Any:
    """0..11 as float32 in `framework` (skipped where it is not installed)."""
    if framework == "numpy":
        return np.arange(12, dtype=np.float32)
    module = pytest.importorskip(framework)
    if framework == "jax":
        return module.numpy.arange(12, dtype=module.numpy.float32)
    return module.arange(12, dtype=module.float32)


@pytest.mark.parametrize(
    ("source", "target", "step", "apis"),
    [
        ("torch", "numpy", Export, (True, False)),
        ("numpy", "torch", Import, (False, True)),
        ("jax", "torch", Import, (False, True)),  # (legacy capsules, boxed as versioned)
    ],
    ids=["torch-numpy-export", "numpy-torch-import", "jax-torch-import"],
)
@pytest.mark.parametrize("edited", [False, True], ids=["as-planned", "edited"])
def test_a_compiled_route_uses_the_exchange_apis_its_plan_names(
    source, target, step, apis, edited, monkeypatch
):
    """torch declares its C exchange API: plans from torch say the export may go through it
    (`Export.exchange_api`), plans into torch that the import may (`Import.exchange_api`). A
    plan edited to say no is followed by the compiled route (C used to look the APIs up on
    the types by itself); the pure route never uses them for a plain share, so this is the
    compiled twin's test (the Paddle one below is both twins')."""
    torch = pytest.importorskip("torch")
    if edited:
        _edit(monkeypatch, target, _edited(step, exchange_api=False))
    hub, convert, planned = _warm(True)
    x = _tensor(source)
    address = x.data_ptr() if source == "torch" else np.from_dlpack(x).ctypes.data
    for call in (1, 2):
        y = convert(x, target)
        assert planned == [1], f"call {call} was planned again"
        if target == "torch":
            assert isinstance(y, torch.Tensor) and y.data_ptr() == address
            assert float((y + 1).sum()) == 78.0  # torch's kernels
        else:
            assert y.ctypes.data == address and (y + 1).sum() == 78.0  # NumPy's
    route = hub.routes.table[type(x)][target]
    said = (False, False) if edited else apis
    assert route.exchange_api == said
    warm = hub.routes.explain(x, target, None, None, None, hub.explain(x, target))
    assert warm is not None and ("__dlpack_c_exchange_api__" in warm.detail) is not edited


@TWINS
@pytest.mark.parametrize("edited", [False, True], ids=["as-planned", "edited"])
def test_a_deferring_route_into_paddle_imports_as_its_import_step_says(
    compiled, edited, monkeypatch
):
    """Paddle frees imports under a lock of its own: routes into it defer the release, and
    import through Paddle's C exchange API where the plan's Import step says so (the pure
    route adopts the boxed tensor through it; it used to ask the target type itself). Edited
    to say no, both twins import through the adapter's importer; either way the result shares
    the array's memory, and the address stays claimed until Paddle releases it."""
    interop_paddle = pytest.importorskip("interop_paddle")
    paddle = interop_paddle.import_paddle()
    if edited:
        _edit(monkeypatch, "paddle", _edited(Import, exchange_api=False))
    hub, convert, planned = _warm(compiled)
    a = np.arange(12, dtype=np.float32)
    for call in (1, 2):
        y = convert(a, "paddle")
        assert isinstance(y, paddle.Tensor) and y.data_ptr() == a.ctypes.data
        assert float((y + 1).sum()) == 78.0  # Paddle's kernels
        assert cap.address_claimed(a.ctypes.data)
        del y
        _released()
        assert not cap.address_claimed(a.ctypes.data)
        assert planned == [1], f"call {call} was planned again"
    route = hub.routes.table[np.ndarray]["paddle"]
    if compiled:
        assert route.exchange_api == (False, not edited)
    elif cap.RELEASES.python_callbacks:  # (else the pure route defers, then imports)
        assert ("adopt(capsule)" in route.source) is not edited, route.source


def _c_route(x: Any, exporter: Any, importer: Any, **fields: Any) -> Any:
    """A compiled route from NumPy arrays like `x`, built directly: `exporter`, then
    `importer` for `x`'s key; `fields`, the steps' arguments of `_speedups.Route`."""
    from interop import readonly
    from interop.speedups import SPEEDUPS

    if SPEEDUPS is None or not HUB.routes.compiled:
        pytest.skip("the compiled accelerator is not active")
    return SPEEDUPS.Route(
        known={SPEEDUPS.fingerprint(exporter(x)): importer},
        exporter=exporter,
        guards=(),
        ranges=(),
        policy=readonly.current_policy,
        share=readonly.SHARE,
        source=np.ndarray,
        export_api=None,
        guarded=False,
        bridge_read_only=False,
        **fields,
    )


@pytest.mark.parametrize("allowed", [False, True], ids=["forbidden", "allowed"])
def test_a_compiled_route_boxes_read_only_tensors_legacy_only_where_allowed(allowed):
    """The C route's own check: a read-only versioned capsule bridged into a legacy one
    (which cannot say READ_ONLY) only with the plan's permission (`legacy_read_only_ok`);
    without it the route gives the call back (None: the full path decides)."""
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False

    def export(x: Any) -> Any:
        return x.__dlpack__(max_version=(1, 0))  # versioned, READ_ONLY set

    route = _c_route(
        a,
        export,
        np.from_dlpack,
        import_api=None,
        versioned=True,
        as_object=True,
        bridge=0,
        legacy_read_only_ok=allowed,
    )
    y = route(a, None)
    if not allowed:
        assert y is None
        return
    assert y.ctypes.data == a.ctypes.data and (y + 1).sum() == 21.0  # NumPy's kernels
    assert not y.flags.writeable  # NumPy marks what a legacy capsule gives it read-only


@pytest.mark.parametrize("bridge", [-1, 1], ids=["no-bridge", "bridge"])
def test_a_compiled_route_boxes_a_legacy_capsule_for_the_exchange_import_only_when_told(bridge):
    """torch's exchange API imports versioned capsules. Python asks for the box of a legacy
    capsule into a versioned one (`routes.exchange_route`); told no bridge, the C route
    hands the legacy capsule to the importer as it is (it used to invent the box)."""
    torch = pytest.importorskip("torch")
    a = np.arange(12, dtype=np.float32)
    imported: list[Any] = []

    def importer(capsule: Any) -> Any:
        imported.append(capsule)
        return torch.from_dlpack(capsule)

    def export(x: Any) -> Any:
        return x.__dlpack__()  # a legacy capsule

    route = _c_route(
        a,
        export,
        importer,
        import_api=torch.Tensor,
        versioned=False,
        as_object=False,
        bridge=bridge,
        legacy_read_only_ok=False,
    )
    t = route(a, None)
    assert isinstance(t, torch.Tensor) and t.data_ptr() == a.ctypes.data
    assert float((t + 1).sum()) == 78.0  # torch's kernels
    assert route.exchange_api == (False, True)
    assert len(imported) == (bridge < 0)  # through the importer, else the exchange API
    with pytest.raises(TypeError, match="has no DLPack 1.x C exchange API"):
        _c_route(
            a,
            export,
            importer,
            import_api=np.ndarray,  # (told to import through an API NumPy does not have)
            versioned=False,
            as_object=False,
            bridge=bridge,
            legacy_read_only_ok=False,
        )
