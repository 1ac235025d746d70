"""What a sharded conversion does, planned once for `convert` and `explain`: `plan` reads the
source's local shards, decides the result from the target's distributed context and checks the
shards, as steps (`ShardedSteps`); `run` carries those steps out (each shard through the
per-tensor path, placed, rebuilt); `describe` says what they do, per shard (`ShardedPlan`).

Loaded on the first sharded array only; `interop.sharding` holds the cheap detection. Every
framework-specific step is asked of the source's or the target's `ShardedArrays` hook (their
adapters' `sharded()`): this module imports no framework.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import BrokenAdapterError, CopyForbiddenError, DeviceError, UnknownFrameworkError
from ..info import Device
from ..step import Step
from .kinds import SHARDS, hook_of, mesh_hook
from .model import LocalShards, MeshMismatchError, MoveShard, UnsupportedShardingError, mapping
from .plans import (
    BUILD,
    LOCAL,
    SAME,
    SHARD_ROUTES,
    ConvertShards,
    KeepLocal,
    MapPlacements,
    PlaceShards,
    Rebuild,
    ReducePartial,
    ReturnSource,
    ShardedPlan,
    ShardedSteps,
    ShardPlan,
)

if TYPE_CHECKING:
    from ..adapter import ShardedArrays
    from ..engine import Calls


@dataclass(frozen=True)
class _Route:
    form: str
    target: str
    why: str = ""
    hook: Any = None  # the target's ShardedArrays (BUILD)
    user_mesh: Any = None


def _target(to: Any, through: Calls) -> tuple[str, ShardedArrays | None]:
    """The target's name and sharded-array hook (the conversion imports its framework)."""
    adapter = through.hub.target(to)  # its errors for an unknown or invalid `to`
    return adapter.name, hook_of(adapter)


def _hook(name: str, through: Calls) -> ShardedArrays | None:
    """The sharded-array hook of framework `name`, if its adapter has one and the framework
    is imported (its arrays can exist only then: never imported here)."""
    try:
        adapter = through.hub.registry.get(name)
    except (UnknownFrameworkError, BrokenAdapterError):  # no adapter: no distributed array
        return None
    return hook_of(adapter) if adapter.imported() else None


def _read(
    x: Any, kind: Any, copy: bool | None, reduce_partial: bool, target: str | None
) -> tuple[LocalShards, str]:
    """The shards of `x` in its own framework, as they will be once pending sums are reduced
    (reducing is a step of the plan), and the note on that reduction, "" if none (`target`:
    where they go, for the refusal's words)."""
    if kind is SHARDS:
        return x, ""
    pending = kind.partial(x)
    if not pending:
        return kind.read(x), ""
    if not reduce_partial:
        raise kind.refuse_partial(x, target)
    if copy is False:
        raise CopyForbiddenError(
            "copy=False, but reducing Partial placements writes the sums into new memory"
        )
    return kind.read(x, partial_as_reduced=True), pending


def _route(
    x: Any,
    kind: Any,
    shards: LocalShards,
    to: tuple[str, Any],
    copy: Any,
    device: Any,
    through: Calls,
) -> _Route:
    target, hook = to
    if device is not None and (hook is None or mesh_hook(device, through) is not hook):
        want = f"a {hook.mesh_name} ({target}'s mesh)" if hook else f"None ({target} has none)"
        raise DeviceError(
            f"a sharded array keeps each shard on its own device: device= may only be {want}, "
            f"not {device!r}"
        )
    if kind is not SHARDS and target == shards.framework:
        own = kind.mesh_of(x)
        if device is not None and device is not own:
            raise MeshMismatchError(
                f"the {target} array is on another mesh than the one given: moving it is a "
                f"reshard between processes, for {target}'s own API, not a conversion"
            )
        if not copy:
            return _Route(SAME, target)
        return _Route(BUILD, target, hook=kind, user_mesh=own)
    if hook is None:
        return _Route(LOCAL, target, f"{target} has no distributed array")
    origin: tuple[int, int] | str | None = None
    theirs = shards.source and shards.source != target
    source = _hook(shards.source, through) if theirs else None
    if source is not None:
        origin = source.processes()
        if isinstance(origin, str):
            return _Route(LOCAL, target, origin)
    why = hook.context(shards, origin, device)
    if why:
        return _Route(LOCAL, target, why)
    return _Route(BUILD, target, hook=hook, user_mesh=device)


def _check(shards: LocalShards, route: _Route, stream: Any) -> tuple[Any, ...]:
    """Refusals that depend on this process's shards; where each one goes in the result."""
    if stream is not None and len({s.device for s in shards}) > 1:
        raise DeviceError(
            f"stream= names one stream, but this process's shards are on "
            f"{sorted(str(s.device) for s in shards)}: leave it None"
        )
    if route.form == BUILD:
        return tuple(route.hook.locate(shards, route.user_mesh))
    return ()


def _exporter(shards: LocalShards, target: str, through: Calls) -> ShardedArrays | None:
    """The hook whose `export_shard` hands each shard to the per-tensor path (JAX host shards
    leave from host device 0); None: the shard itself, as within its own framework."""
    return None if target == shards.framework else _hook(shards.framework, through)


def plan(
    x: Any,
    kind: Any,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
    through: Calls,
) -> ShardedSteps:
    """The steps of converting sharded array `x` (of `kind`) into `to`, decided and checked,
    without moving data: what `convert` runs and `explain` describes (each shard through
    `through`, the calls of the hub the conversion is made through). It raises what the
    conversion refuses."""
    named = _target(to, through)
    target = named[0]
    shards, pending = _read(x, kind, copy, reduce_partial, target)
    route = _route(x, kind, shards, named, copy, device, through)
    origin = shards.source or shards.framework
    label = f"{shards.framework} (local shards)" if kind is SHARDS else str(kind.label)
    steps: list[Step] = [ReducePartial(origin, pending, hook=kind)] if pending else []
    if route.form == SAME:
        steps.append(ReturnSource(target))
        return ShardedSteps(label, target, shards, tuple(steps))
    layout = route.hook.fit(shards, route.user_mesh) if route.form == BUILD else shards
    where = _check(layout, route, stream)
    why = f"each of the {len(layout)} local shard(s) with interop.convert"
    export = _exporter(layout, target, through)
    steps.append(MapPlacements(origin, layout=layout))
    convert = ConvertShards(target, why, copy=copy, stream=stream, export=export, through=through)
    steps.append(convert)
    if route.form == LOCAL:
        steps.append(KeepLocal(target, route.why, count=len(layout)))
        return ShardedSteps(label, target, shards, tuple(steps))
    if where and hasattr(route.hook, "place"):  # else its build places them
        why = "each converted shard onto the device its mesh position names"
        steps.append(PlaceShards(target, why, hook=route.hook, devices=where, copy=copy))
    hook, user_mesh = route.hook, route.user_mesh
    steps.append(Rebuild(target, "", hook, user_mesh, devices=where, copy=copy, layout=layout))
    return ShardedSteps(label, target, shards, tuple(steps))


class ShardedConversion:
    """A sharded conversion in progress: the data its plan's steps work on (`plans.ShardedRun`).
    It decides nothing: every choice is in the steps."""

    def __init__(self, x: Any, decided: ShardedSteps) -> None:
        self.source = x
        self.x = x
        self.read = decided.shards
        self.shards = decided.shards
        self.arrays: list[Any] = []
        self.result: Any = None

    def reduce_partial(self, step: ReducePartial) -> None:
        self.x = step.hook.reduce_partial(self.x)
        self.shards = step.hook.read(self.x)

    def map_placements(self, step: MapPlacements) -> None:
        layout = step.layout
        if layout is None:
            return
        if self.shards is not self.read:  # read again (reduced): the data on the planned layout
            held = zip(layout, self.shards, strict=True)
            layout = replace(layout, shards=tuple(replace(s, data=r.data) for s, r in held))
        self.shards = layout

    def convert_shards(self, step: ConvertShards) -> None:
        convert_one = step.through.convert
        data = [s.data for s in self.shards]
        if step.export is not None:
            data = [step.export.export_shard(d)[0] for d in data]
        to, copy, stream = step.where, step.copy, step.stream  # where: the target's name
        self.arrays = [convert_one(d, to, copy=copy, stream=stream) for d in data]

    def place_shards(self, step: PlaceShards) -> None:
        place, copy = step.hook.place, step.copy
        self.arrays = [place(a, d, copy) for a, d in zip(self.arrays, step.devices, strict=True)]

    def rebuild(self, step: Rebuild) -> None:
        where = list(step.devices)
        self.result = step.hook.build(self.shards, self.arrays, where, step.copy, step.user_mesh)

    def keep_local(self, step: KeepLocal) -> None:
        held = zip(self.shards, self.arrays, strict=True)
        pieces = tuple(replace(s, data=c) for s, c in held)
        self.result = replace(self.shards, framework=step.where, shards=pieces, why=step.why)

    def return_source(self, step: ReturnSource) -> None:
        self.result = self.source


def run(x: Any, decided: ShardedSteps | ShardedPlan) -> Any:
    """Carry out the steps planned for sharded array `x` (an explained plan's too), in order,
    and return what they made."""
    if isinstance(decided, ShardedPlan):
        if decided.decision is None:
            raise UnsupportedShardingError("a ShardedPlan made by hand holds no shards to run on")
        decided = replace(decided.decision, steps=decided.steps)
    conv = ShardedConversion(x, decided)
    for step in decided.steps:
        step.run(conv)
    return conv.result


def convert(
    x: Any,
    kind: Any,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
    through: Calls,
) -> Any:
    """`interop.sharding.convert_sharded`, once `x` is known to be sharded (of `kind`)."""
    return run(x, plan(x, kind, to, copy, device, stream, reduce_partial, through))


def explain(
    x: Any,
    kind: Any,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
    through: Calls,
) -> ShardedPlan:
    """`interop.sharding.explain_sharded`, once `x` is known to be sharded (of `kind`)."""
    decided = plan(x, kind, to, copy, device, stream, reduce_partial, through)
    return describe(decided, copy, stream, through)


def describe(decided: ShardedSteps, copy: bool | None, stream: Any, through: Calls) -> ShardedPlan:
    """What the planned steps do, per shard: each shard's per-tensor plan (`interop.explain`,
    which costs more than its conversion: `convert` never asks for it) and placement."""
    explain_one = through.explain
    shards, target = decided.layout, decided.target
    last = decided.steps[-1]
    rebuild = last if isinstance(last, Rebuild) else None
    where = rebuild.devices if rebuild is not None else ()
    export = _exporter(shards, target, through)
    plans = []
    for i, shard in enumerate(shards):
        data, before = (shard.data, None) if export is None else export.export_shard(shard.data)
        plan_one = explain_one(data, target, copy=copy, stream=stream)
        if plan_one.error is not None:  # a shard convert refuses: the whole array is refused
            raise plan_one.error
        place = None
        if rebuild is not None and where and shards.framework != target:
            place = rebuild.hook.place_step(data, where[i], copy)
        plans.append(ShardPlan(shard.index, shard.device, shard.process, plan_one, place, before))
    copied = [p for p in plans if not p.zero_copy]
    notes = tuple(s.why for s in decided.steps if isinstance(s, ReducePartial))
    return ShardedPlan(
        source=decided.source,
        target=target,
        dtype=shards.dtype,
        device=shards[0].device if len(shards) else Device(shards.mesh.device_type),
        layout="sharded",
        zero_copy=not copied and not notes,
        copy_at=next((p.plan.copy_at for p in copied if p.plan.copy_at), None),
        steps=decided.steps,
        reasons=notes + tuple(f"shard {list(s.index)}: {r}" for s in copied for r in _why(s)),
        route=SHARD_ROUTES,
        shape=shards.shape,
        mapping=mapping(shards.spec, shards.mesh, shards.source),
        result=decided.result,
        shards=tuple(plans),
        decision=decided,
    )


def _why(shard: ShardPlan) -> tuple[str, ...]:
    moved = isinstance(shard.place, MoveShard)
    return shard.plan.reasons + ((shard.place.why,) if moved and shard.place else ())


def local(x: Any, kind: Any, to: Any, copy: bool | None, through: Calls) -> LocalShards:
    """`interop.sharding.local_shards`, once `x` is known to be sharded (of `kind`)."""
    convert_one = through.convert
    named = None if to is None else _target(to, through)[0]
    shards, _ = _read(x, kind, copy, reduce_partial=False, target=named)
    target = shards.framework if named is None else named
    export = _exporter(shards, target, through)
    pieces = []
    for s in shards:
        data = s.data if export is None else export.export_shard(s.data)[0]
        pieces.append(replace(s, data=convert_one(data, target, copy=copy)))
    return replace(shards, framework=target, shards=tuple(pieces), why="asked for local shards")
