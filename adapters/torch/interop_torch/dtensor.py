"""The PyTorch side of `interop.sharding`: read a DTensor into its local shard, and build a
DTensor from one (what `interop_torch.sharding.TorchSharded` hands the core).

Only called once torch is imported. `DTensor.to_local()` shares the local tensor's memory and
`DTensor.from_local(..., run_check=False)` wraps one without a collective, so neither moves
data. Building a `DeviceMesh` is collective (it creates process groups), so meshes are built
once per layout and reused; pass your own as `device=` to use its groups.
"""

from __future__ import annotations

import sys
import threading
from functools import lru_cache
from typing import Any

from interop.info import Device, compact_strides
from interop.sharding.model import (
    LocalShard,
    LocalShards,
    MeshLayout,
    MeshMismatchError,
    PartialPlacementError,
    Spec,
    UnsupportedShardingError,
    check_even,
    placements_from_spec,
    shard_index,
    spec_from_placements,
)

_MESHES: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def distributed() -> Any:
    """torch.distributed when it is initialised in this process, else None (never imports)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def is_device_mesh(device: Any) -> bool:
    mod = sys.modules.get("torch.distributed.device_mesh")
    return mod is not None and isinstance(device, mod.DeviceMesh)


def _kind(device_type: str) -> str:
    return "cuda" if device_type in ("cuda", "rocm") else device_type


def partial_dims(x: Any) -> list[int]:
    return [i for i, p in enumerate(x.placements) if p.is_partial()]


def refuse_partial(x: Any, target: str | None = None) -> PartialPlacementError:
    """The refusal of a Partial DTensor on its way to `target` (None: its own local shards)."""
    where = f"no {target} counterpart" if target else "no meaning as local shards"
    return PartialPlacementError(
        f"the DTensor is Partial over mesh dimension(s) {partial_dims(x)} ({x.placements}): "
        f"its shards are pending sums with {where}. Reduce it first "
        f"(x.redistribute(x.device_mesh, [Replicate() ...])) or ask for that with "
        f"interop.sharding.convert_sharded(x, to, reduce_partial=True)"
    )


def reduce_partial(x: Any) -> Any:
    """`x` with every Partial placement all-reduced into Replicate by torch's own collective."""
    from torch.distributed.tensor import Replicate

    placements = [Replicate() if p.is_partial() else p for p in x.placements]
    return x.redistribute(x.device_mesh, placements)


def read(x: Any, partial_as_replicate: bool = False) -> LocalShards:
    """This rank's shard of DTensor `x` (`to_local()`, shared), with its global index.
    `partial_as_replicate` describes a Partial DTensor as it will be once reduced (explain)."""
    rank = sys.modules["torch.distributed"].get_rank()
    shape = tuple(x.shape)
    placements = tuple(x.placements)
    layout, spec, coords, index = _described(
        x.device_mesh, placements, shape, rank, partial_as_replicate
    )
    local = x.to_local()
    expected = tuple(s.stop - s.start for s in index)
    if tuple(local.shape) != expected:
        raise UnsupportedShardingError(
            f"rank {rank}'s local tensor has shape {list(local.shape)}, but its placements "
            f"{placements} give {list(expected)}"
        )
    device = Device(local.device.type, local.device.index or 0)
    shard = LocalShard(local, index, device, coords, rank)
    dtype = str(x.dtype).removeprefix("torch.")
    return LocalShards("torch", shape, dtype, layout, spec, (shard,), source="torch")


@lru_cache(maxsize=256)
def _described(
    mesh: Any, placements: tuple[Any, ...], shape: tuple[int, ...], rank: int, partial_ok: bool
) -> tuple[MeshLayout, Spec, tuple[int, ...], tuple[slice, ...]]:
    """The layout and spec of a DTensor's mesh and placements, and this rank's place in it."""
    from torch.distributed.tensor import Shard

    ndim = len(shape)
    kinds: list[tuple[str, int]] = []
    for p in placements:
        if type(p) is Shard:
            kinds.append(("shard", p.dim % ndim))
        elif p.is_replicate() or (partial_ok and p.is_partial()):
            kinds.append(("replicate", -1))
        else:
            raise UnsupportedShardingError(
                f"cannot convert a DTensor with a {p!r} placement: only Shard, Replicate (and "
                f"Partial, reduced first) have a PartitionSpec counterpart"
            )
    names = tuple(mesh.mesh_dim_names or (f"dim{i}" for i in range(mesh.ndim)))
    ranks = tuple(int(r) for r in mesh.mesh.flatten().tolist())
    layout = MeshLayout(names, tuple(mesh.shape), ranks, _kind(mesh.device_type))
    spec = spec_from_placements(tuple(kinds), names, ndim)
    check_even(shape, spec, layout)
    if rank not in ranks:
        raise MeshMismatchError(f"torch rank {rank} is not in the DTensor's mesh {ranks}")
    coords = layout.coordinates(ranks.index(rank))
    return layout, spec, coords, shard_index(shape, spec, layout, coords)


def context(layout: MeshLayout, origin: tuple[int, int] | None, source: str) -> tuple[int, int]:
    """(rank, world size) once the shards' processes are checked to be torch ranks. `origin`:
    this process's (index, count) in framework `source`, which numbered them (None: torch)."""
    dist = distributed()
    assert dist is not None
    return _context(layout, origin, source, dist.get_rank(), dist.get_world_size())


@lru_cache(maxsize=256)
def _context(
    layout: MeshLayout, origin: tuple[int, int] | None, source: str, rank: int, world: int
) -> tuple[int, int]:
    counts = {p: layout.processes.count(p) for p in set(layout.processes)}
    crowded = {p: n for p, n in counts.items() if n > 1}
    if crowded:
        raise MeshMismatchError(
            f"the {layout} puts several devices in one process ({crowded}), and a DTensor holds "
            f"one shard per rank; interop.sharding.local_shards(x, 'torch') gives them apart"
        )
    if origin is not None:
        index, count = origin
        if count != world or index != rank:
            raise MeshMismatchError(
                f"{source} process {index} of {count} cannot be matched to torch rank {rank} of "
                f"{world}: run one {source} process per torch rank, numbered as the ranks are"
            )
    if max(layout.processes) >= world:
        raise MeshMismatchError(f"the {layout} names processes beyond torch's world of {world}")
    return rank, world


def describe(layout: MeshLayout, user_mesh: Any = None) -> str:
    grid = layout.grid()
    mine = " (the one given)" if user_mesh is not None else ""
    return f"DeviceMesh({_kind(layout.device_type)!r}, {grid}, mesh_dim_names={layout.names}){mine}"


@lru_cache(maxsize=256)
def check_mesh(mesh: Any, layout: MeshLayout) -> None:
    ranks = tuple(int(r) for r in mesh.mesh.flatten().tolist())
    if tuple(mesh.shape) != layout.shape or ranks != layout.processes:
        raise MeshMismatchError(
            f"the given DeviceMesh {tuple(mesh.shape)} over ranks {list(ranks)} does not match "
            f"the shards' {layout}"
        )


def device_mesh(layout: MeshLayout) -> Any:
    """A DeviceMesh for the layout: built once (a collective) and reused."""
    from torch.distributed.device_mesh import DeviceMesh

    dist = distributed()
    world = dist.group.WORLD if dist is not None else None
    key = (id(world), _kind(layout.device_type), layout.shape, layout.processes, layout.names)
    with _LOCK:
        found = _MESHES.get(key)
        if found is not None and found[0] is world:
            return found[1]
    mesh = DeviceMesh(_kind(layout.device_type), layout.grid(), mesh_dim_names=layout.names)
    with _LOCK:
        _MESHES[key] = (world, mesh)  # the group is kept, so its id is not reused
    return mesh


def build(shards: LocalShards, local: Any, mesh: Any) -> Any:
    """The DTensor over `mesh` whose local shard is `local` (a torch tensor), without a check
    or a collective: the placements come from the shards' spec."""
    from torch.distributed.tensor import DTensor

    placements, shape, stride = _placements(shards.spec, shards.mesh.names, shards.shape)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=shape, stride=stride)


@lru_cache(maxsize=256)
def _placements(
    spec: Spec, names: tuple[str, ...], shape: tuple[int, ...]
) -> tuple[tuple[Any, ...], Any, tuple[int, ...]]:
    import torch
    from torch.distributed.tensor import Replicate, Shard

    dims = placements_from_spec(spec, names)
    placements = tuple(Replicate() if d is None else Shard(d) for d in dims)
    return placements, torch.Size(shape), compact_strides(shape)
