"""What a sharded conversion does: read the source's local shards, decide the result from the
target's distributed context, convert each shard through the per-tensor path, rebuild.

Loaded on the first sharded array only; `interop.sharding` holds the cheap detection. Every
framework-specific step is asked of the source's or the target's `ShardedArrays` hook (their
adapters' `sharded()`): this module imports no framework.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import BrokenAdapterError, CopyForbiddenError, DeviceError, UnknownFrameworkError
from ..info import Device
from ..plan import Note, Step
from ..registry import REGISTRY
from .kinds import SHARDS, hook_of, mesh_hook, per_tensor
from .model import (
    ConvertShards,
    LocalShards,
    MapPlacements,
    MeshMismatchError,
    MoveShard,
    Rebuild,
    mapping,
)
from .plans import ShardedPlan, ShardPlan

if TYPE_CHECKING:
    from ..adapter import ShardedArrays

#: what a conversion returns: the source itself, the target's distributed array rebuilt, or
#: LocalShards
SAME, BUILD, LOCAL = "same", "build", "local shards"


@dataclass(frozen=True)
class _Route:
    form: str
    target: str
    why: str = ""
    hook: Any = None  # the target's ShardedArrays (BUILD)
    user_mesh: Any = None


def _target(to: Any) -> tuple[str, ShardedArrays | None]:
    """The target's name and sharded-array hook (the conversion imports its framework)."""
    adapter = per_tensor().target(to)  # its errors for an unknown or invalid `to`
    return adapter.name, hook_of(adapter)


def _hook(name: str) -> ShardedArrays | None:
    """The sharded-array hook of framework `name`, if its adapter has one and the framework
    is imported (its arrays can exist only then: never imported here)."""
    try:
        adapter = REGISTRY.get(name)
    except (UnknownFrameworkError, BrokenAdapterError):  # no adapter: no distributed array
        return None
    return hook_of(adapter) if adapter.imported() else None


def _read(
    x: Any, kind: Any, copy: bool | None, reduce_partial: bool, run: bool, target: str | None
) -> tuple[LocalShards, tuple[str, ...]]:
    """The shards of `x` in its own framework, and what was done to them first (`target`:
    where they go, for the refusal's words)."""
    if kind is SHARDS:
        return x, ()
    pending = kind.partial(x)
    if not pending:
        return kind.read(x), ()
    if not reduce_partial:
        raise kind.refuse_partial(x, target)
    if copy is False:
        raise CopyForbiddenError(
            "copy=False, but reducing Partial placements writes the sums into new memory"
        )
    if run:
        return kind.read(kind.reduce_partial(x)), (pending,)
    return kind.read(x, partial_as_reduced=True), (pending,)


def _route(
    x: Any, kind: Any, shards: LocalShards, to: tuple[str, Any], copy: Any, device: Any
) -> _Route:
    target, hook = to
    if device is not None and (hook is None or mesh_hook(device) is not hook):
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
    source = _hook(shards.source) if shards.source and shards.source != target else None
    if source is not None:
        origin = source.processes()
        if isinstance(origin, str):
            return _Route(LOCAL, target, origin)
    why = hook.context(shards, origin, device)
    if why:
        return _Route(LOCAL, target, why)
    return _Route(BUILD, target, hook=hook, user_mesh=device)


def _check(shards: LocalShards, route: _Route, stream: Any) -> list[Any]:
    """Refusals that depend on this process's shards; where each one goes in the result."""
    if stream is not None and len({s.device for s in shards}) > 1:
        raise DeviceError(
            f"stream= names one stream, but this process's shards are on "
            f"{sorted(str(s.device) for s in shards)}: leave it None"
        )
    if route.form == BUILD:
        return route.hook.locate(shards, route.user_mesh)
    return []


def _result(shards: LocalShards, route: _Route) -> str:
    if route.form == SAME:
        return f"the {route.target} array itself (same framework)"
    if route.form == BUILD:
        return route.hook.describe(shards, route.user_mesh)
    return (
        f"LocalShards: this process's {len(shards)} {route.target} shard(s) with their global "
        f"indices and devices, not gathered, because {route.why}"
    )


def _fit(shards: LocalShards, route: _Route) -> LocalShards:
    return route.hook.fit(shards, route.user_mesh) if route.form == BUILD else shards


def convert(
    x: Any,
    kind: Any,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
) -> Any:
    """`interop.sharding.convert_sharded`, once `x` is known to be sharded (of `kind`)."""
    convert_one = per_tensor().convert
    named = _target(to)
    target = named[0]
    shards, _ = _read(x, kind, copy, reduce_partial, run=True, target=target)
    route = _route(x, kind, shards, named, copy, device)
    if route.form == SAME:
        return x
    shards = _fit(shards, route)
    where = _check(shards, route, stream)
    sources = [_exportable(s.data, shards, target)[0] for s in shards]
    converted = [convert_one(data, target, copy=copy, stream=stream) for data in sources]
    if route.form == LOCAL:
        pieces = tuple(replace(s, data=c) for s, c in zip(shards, converted, strict=True))
        return replace(shards, framework=target, shards=pieces, why=route.why)
    return route.hook.build(shards, converted, where, copy, route.user_mesh)


def explain(
    x: Any,
    kind: Any,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
) -> ShardedPlan:
    """`interop.sharding.explain_sharded`, once `x` is known to be sharded (of `kind`)."""
    explain_one = per_tensor().explain
    named = _target(to)
    target = named[0]
    shards, notes = _read(x, kind, copy, reduce_partial, run=False, target=target)
    route = _route(x, kind, shards, named, copy, device)
    shards = _fit(shards, route)
    where = _check(shards, route, stream)
    plans = []
    for i, shard in enumerate(shards):
        data, before = _exportable(shard.data, shards, target)
        plan = explain_one(data, target, copy=copy, stream=stream)
        place = None
        if where and shards.framework != target:
            place = route.hook.place_step(data, where[i], copy)
        plans.append(ShardPlan(shard.index, shard.device, shard.process, plan, place, before))
    copied = [p for p in plans if not p.zero_copy]
    source = f"{shards.framework} (local shards)" if kind is SHARDS else str(kind.label)
    result = _result(shards, route)
    how = mapping(shards.spec, shards.mesh, shards.source)
    steps = (
        *(Note(shards.source or shards.framework, n) for n in notes),
        MapPlacements(shards.source or shards.framework, how),
        ConvertShards(target, f"each of the {len(plans)} local shard(s) with interop.convert"),
        Rebuild(target, result),
    )
    return ShardedPlan(
        source=source,
        target=target,
        dtype=shards.dtype,
        device=shards[0].device if len(shards) else Device(shards.mesh.device_type),
        layout="sharded",
        zero_copy=not copied and not notes,
        copy_at=next((p.plan.copy_at for p in copied if p.plan.copy_at), None),
        steps=steps,
        reasons=notes + tuple(f"shard {list(s.index)}: {r}" for s in copied for r in _why(s)),
        shape=shards.shape,
        mapping=how,
        result=result,
        shards=tuple(plans),
    )


def _why(shard: ShardPlan) -> tuple[str, ...]:
    moved = isinstance(shard.place, MoveShard)
    return shard.plan.reasons + ((shard.place.why,) if moved and shard.place else ())


def _exportable(data: Any, shards: LocalShards, target: str) -> tuple[Any, Step | None]:
    """The shard to hand the per-tensor path, as its framework's hook gives it (JAX host
    shards leave from host device 0)."""
    hook = None if target == shards.framework else _hook(shards.framework)
    return (data, None) if hook is None else hook.export_shard(data)


def local(x: Any, kind: Any, to: Any, copy: bool | None) -> LocalShards:
    """`interop.sharding.local_shards`, once `x` is known to be sharded (of `kind`)."""
    convert_one = per_tensor().convert
    named = None if to is None else _target(to)[0]
    shards, _ = _read(x, kind, copy, reduce_partial=False, run=True, target=named)
    target = shards.framework if named is None else named
    pieces = tuple(
        replace(s, data=convert_one(_exportable(s.data, shards, target)[0], target, copy=copy))
        for s in shards
    )
    return replace(shards, framework=target, shards=pieces, why="asked for local shards")
