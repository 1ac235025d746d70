"""What a sharded conversion does: read the source's local shards, decide the result from the
target's distributed context, convert each shard through the per-tensor path, rebuild.

Loaded on the first sharded array only; `interop.sharding` holds the cheap detection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import CopyForbiddenError, DeviceError
from ..info import Device
from ..plan import Note, Step
from . import DTENSOR, JAX, SHARDS, jax_side, torch_side
from .model import (
    ConvertShards,
    LocalShards,
    MapPlacements,
    MeshMismatchError,
    MoveShard,
    Rebuild,
    ShardedPlan,
    ShardPlan,
    format_placements,
    format_spec,
    mapping,
    renamed,
)

#: what a conversion returns: the source itself, a rebuilt DTensor or global JAX array, or
#: LocalShards
SAME, BUILD_DTENSOR, BUILD_JAX, LOCAL = "same", "dtensor", "jax", "local shards"


@dataclass(frozen=True)
class _Route:
    form: str
    target: str
    why: str = ""
    user_mesh: Any = None
    devices: tuple[Any, ...] = ()  # JAX devices at every mesh position (BUILD_JAX)


def _target_name(to: Any) -> str:
    from ..api import HUB  # its lookup and its errors for an unknown or invalid `to`

    return HUB.target(to).name


def _read(
    x: Any, kind: str, copy: bool | None, reduce_partial: bool, run: bool, target: str | None
) -> tuple[LocalShards, tuple[str, ...]]:
    """The shards of `x` in its own framework, and what was done to them first (`target`:
    where they go, for the refusal's words)."""
    if kind == SHARDS:
        return x, ()
    if kind == JAX:
        return jax_side.read(x), ()
    if not torch_side.partial_dims(x):
        return torch_side.read(x), ()
    if not reduce_partial:
        raise torch_side.refuse_partial(x, target)
    if copy is False:
        raise CopyForbiddenError(
            "copy=False, but reducing Partial placements writes the sums into new memory"
        )
    why = (
        f"Partial placements over mesh dimension(s) {torch_side.partial_dims(x)} are "
        "all-reduced first into new memory (DTensor.redistribute, torch's own collective)",
    )
    if run:
        return torch_side.read(torch_side.reduce_partial(x)), why
    return torch_side.read(x, partial_as_replicate=True), why


def _own_mesh(x: Any, kind: str) -> Any:
    return x.device_mesh if kind == DTENSOR else x.sharding.mesh


def _route(x: Any, kind: str, shards: LocalShards, target: str, copy: Any, device: Any) -> _Route:
    torch_mesh = torch_side.is_device_mesh(device)
    jax_mesh = jax_side.is_mesh(device)
    if device is not None and not (
        (target == "torch" and torch_mesh) or (target == "jax" and jax_mesh)
    ):
        raise DeviceError(
            f"a sharded array keeps each shard on its own device: device= may only be a "
            f"DeviceMesh (into torch) or a jax.sharding.Mesh (into JAX), not {device!r}"
        )
    if kind != SHARDS and target == shards.framework:
        own = _own_mesh(x, kind)
        if device is not None and device is not own:
            raise MeshMismatchError(
                f"the {target} array is on another mesh than the one given: moving it is a "
                f"reshard between processes, for {target}'s own API, not a conversion"
            )
        if not copy:
            return _Route(SAME, target)
        if kind == DTENSOR:
            return _Route(BUILD_DTENSOR, target, user_mesh=own)
        return _Route(BUILD_JAX, target, user_mesh=own, devices=tuple(own.devices.flat))
    jax_origin = shards.mesh.device_ids is not None
    if target == "torch":
        if torch_side.distributed() is None:
            return _Route(LOCAL, target, "torch.distributed is not initialised in this process")
        torch_side.context(shards.mesh, jax_origin)
        if torch_mesh:
            torch_side.check_mesh(device, shards.mesh)
        return _Route(BUILD_DTENSOR, target, user_mesh=device)
    if target == "jax":
        ranks = None
        if not jax_origin:
            dist = torch_side.distributed()
            if dist is None:
                return _Route(LOCAL, target, "the shards' torch ranks have no process group here")
            ranks = (dist.get_rank(), dist.get_world_size())
        why = jax_side.context(shards.mesh, ranks)
        if why:
            if jax_mesh:
                raise MeshMismatchError(f"cannot rebuild over the given Mesh: {why}")
            return _Route(LOCAL, target, why)
        local = shards.shards[0].device if shards.shards else None
        found = jax_side.mesh_devices(shards.mesh, local, device if jax_mesh else None)
        return _Route(BUILD_JAX, target, user_mesh=device, devices=tuple(found))
    return _Route(LOCAL, target, f"{target} has no distributed array")


def _check(shards: LocalShards, route: _Route, stream: Any) -> list[Any]:
    """Refusals that depend on this process's shards; the JAX device each one belongs on."""
    if stream is not None and len({s.device for s in shards}) > 1:
        raise DeviceError(
            f"stream= names one stream, but this process's shards are on "
            f"{sorted(str(s.device) for s in shards)}: leave it None"
        )
    if route.form == BUILD_DTENSOR and len(shards) != 1:
        raise MeshMismatchError(
            f"a DTensor holds one shard per rank, and this process holds {len(shards)}"
        )
    if route.form == BUILD_JAX:
        return jax_side.wanted_devices(shards, route.devices)
    return []


def _result(shards: LocalShards, route: _Route) -> str:
    if route.form == SAME:
        return f"the {route.target} array itself (same framework)"
    if route.form == BUILD_DTENSOR:
        where = torch_side.describe(shards.mesh, route.user_mesh)
        placements = format_placements(shards.spec, shards.mesh.names)
        return f"a DTensor with placements {placements} on {where}"
    if route.form == BUILD_JAX:
        axes = dict(zip(shards.mesh.names, shards.mesh.shape, strict=True))
        return f"a global jax.Array with NamedSharding(Mesh({axes}), {format_spec(shards.spec)})"
    return (
        f"LocalShards: this process's {len(shards)} {route.target} shard(s) with their global "
        f"indices and devices, not gathered, because {route.why}"
    )


def convert(
    x: Any,
    kind: str,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
) -> Any:
    """`interop.sharding.convert_sharded`, once `x` is known to be sharded (of `kind`)."""
    from .. import convert as convert_one

    target = _target_name(to)
    shards, _ = _read(x, kind, copy, reduce_partial, run=True, target=target)
    route = _route(x, kind, shards, target, copy, device)
    if route.form == SAME:
        return x
    if route.form == BUILD_JAX and route.user_mesh is not None:
        shards = renamed(shards, tuple(route.user_mesh.axis_names))
    wanted = _check(shards, route, stream)
    sources = [_exportable(s.data, shards, target)[0] for s in shards]
    converted = [convert_one(data, target, copy=copy, stream=stream) for data in sources]
    if route.form == LOCAL:
        pieces = tuple(replace(s, data=c) for s, c in zip(shards, converted, strict=True))
        return replace(shards, framework=target, shards=pieces, why=route.why)
    if route.form == BUILD_JAX:
        return jax_side.assemble(shards, converted, wanted, route.devices, copy, route.user_mesh)
    mesh = route.user_mesh or torch_side.device_mesh(shards.mesh)
    return torch_side.build(shards, converted[0], mesh)


def explain(
    x: Any,
    kind: str,
    to: Any,
    copy: bool | None,
    device: Any,
    stream: Any,
    reduce_partial: bool,
) -> ShardedPlan:
    """`interop.sharding.explain_sharded`, once `x` is known to be sharded (of `kind`)."""
    from .. import explain as explain_one

    target = _target_name(to)
    shards, notes = _read(x, kind, copy, reduce_partial, run=False, target=target)
    route = _route(x, kind, shards, target, copy, device)
    if route.form == BUILD_JAX and route.user_mesh is not None:
        shards = renamed(shards, tuple(route.user_mesh.axis_names))
    wanted = _check(shards, route, stream)
    plans = []
    for i, shard in enumerate(shards):
        data, before = _exportable(shard.data, shards, target)
        plan = explain_one(data, target, copy=copy, stream=stream)
        place = None
        if wanted and shards.framework != "jax":
            place = jax_side.place_step(jax_side.landing(data), wanted[i], copy)
        plans.append(ShardPlan(shard.index, shard.device, shard.process, plan, place, before))
    copied = [p for p in plans if not p.zero_copy]
    source = {JAX: "jax (sharded)", DTENSOR: "torch (DTensor)"}.get(
        kind, f"{shards.framework} (local shards)"
    )
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
    """The shard to hand the per-tensor path: JAX host shards leave from host device 0."""
    if shards.framework != "jax" or target == "jax":
        return data, None
    return jax_side.host_alias(data)


def local(x: Any, kind: str, to: Any, copy: bool | None) -> LocalShards:
    """`interop.sharding.local_shards`, once `x` is known to be sharded (of `kind`)."""
    from .. import convert as convert_one

    named = None if to is None else _target_name(to)
    shards, _ = _read(x, kind, copy, reduce_partial=False, run=True, target=named)
    target = shards.framework if named is None else named
    pieces = tuple(
        replace(s, data=convert_one(_exportable(s.data, shards, target)[0], target, copy=copy))
        for s in shards
    )
    return replace(shards, framework=target, shards=pieces, why="asked for local shards")
