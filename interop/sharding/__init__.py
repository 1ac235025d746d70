"""Sharded arrays: a `jax.Array` over a mesh <-> a torch `DTensor`, shard by shard, zero-copy.

No data moves between processes: each process converts the shards it holds through the
per-tensor `interop.convert`, and the target's own distributed array is rebuilt around them
(`DTensor.from_local`, `jax.make_array_from_single_device_arrays`). Where the target has no
distributed context to rebuild in, the result is `LocalShards` (the shards, their global
indices and devices), never a gather. `interop.convert` and `interop.explain` call
`convert_sharded` / `explain_sharded` first; both return None at once for anything that is
not a sharded array, looking at types only (no framework is imported). The conversion itself
(`dispatch`, `jax_side`, `torch_side`) is imported with the first sharded array.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import (
        LocalShard,
        LocalShards,
        MeshLayout,
        MeshMismatchError,
        PartialPlacementError,
        RemoteShardError,
        ShardedPlan,
        ShardingError,
        ShardPlan,
        UnevenShardsError,
        UnsupportedShardingError,
    )

#: the types and errors, defined in `.model` and loaded with it on first use: building their
#: dataclasses costs a few ms, which `import interop` need not pay
MODEL_NAMES = (
    "LocalShard",
    "LocalShards",
    "MeshLayout",
    "MeshMismatchError",
    "PartialPlacementError",
    "RemoteShardError",
    "ShardPlan",
    "ShardedPlan",
    "ShardingError",
    "UnevenShardsError",
    "UnsupportedShardingError",
)

__all__ = [
    "LocalShard",
    "LocalShards",
    "MeshLayout",
    "MeshMismatchError",
    "PartialPlacementError",
    "RemoteShardError",
    "ShardPlan",
    "ShardedPlan",
    "ShardingError",
    "UnevenShardsError",
    "UnsupportedShardingError",
    "convert_sharded",
    "explain_sharded",
    "is_sharded",
    "local_shards",
]


def __getattr__(name: str) -> Any:
    if name in MODEL_NAMES:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DTENSOR, JAX, SHARDS = "dtensor", "jax", "shards"
_UNSEEN = "unseen"
_KINDS: dict[type, str | None] = {}
_SINGLE_DEVICE: list[type] = []  # jax.sharding.SingleDeviceSharding, once JAX is seen


def _classify(cls: type) -> str | None:
    kind = None
    model = sys.modules.get(f"{__name__}.model")  # LocalShards exist only once it is loaded
    dtensor = sys.modules.get("torch.distributed.tensor")
    jax = sys.modules.get("jax")
    if model is not None and issubclass(cls, model.LocalShards):
        kind = SHARDS
    elif dtensor is not None and issubclass(cls, dtensor.DTensor):
        kind = DTENSOR
    elif jax is not None and issubclass(cls, jax.Array) and not issubclass(cls, jax.core.Tracer):
        kind = JAX
        if not _SINGLE_DEVICE:
            _SINGLE_DEVICE.append(jax.sharding.SingleDeviceSharding)
    _KINDS[cls] = kind  # a type never changes kind: DTensor and JAX types exist only once imported
    return kind


def sharded_kind(x: Any, device: Any = None) -> str | None:
    """ "dtensor", "jax" or "shards" for sharded arrays, None for anything else (fast)."""
    cls = type(x)
    kind = _KINDS.get(cls, _UNSEEN)
    if kind is None:
        return None
    if kind == _UNSEEN:
        kind = _classify(cls)
    if kind != JAX:
        return kind
    sharding = x.sharding
    if type(sharding) is _SINGLE_DEVICE[0]:
        return None
    if len(sharding.device_set) > 1:
        return JAX
    # a one-device NamedSharding is a plain array, unless a DeviceMesh is asked for
    meshes = sys.modules.get("torch.distributed.device_mesh")
    return JAX if meshes is not None and isinstance(device, meshes.DeviceMesh) else None


def is_sharded(x: Any) -> bool:
    """Whether `x` is a DTensor, a JAX array sharded over several devices, or LocalShards."""
    return sharded_kind(x) is not None


def convert_sharded(
    x: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    reduce_partial: bool = False,
) -> Any:
    """Convert a sharded array shard by shard (None when `x` is not one: see `is_sharded`).

    Into torch: a DTensor when torch.distributed is initialised, one JAX process per rank.
    Into JAX: a global jax.Array with the matching NamedSharding, when JAX has one process
    per torch rank (or the shards came from JAX). Otherwise, or into any other framework:
    `LocalShards`. `device` may be your own DeviceMesh or Mesh to build on. `reduce_partial`
    all-reduces torch Partial placements first (torch's collective, new memory).
    """
    if _KINDS.get(type(x), _UNSEEN) is None:  # the hot path: a plain tensor type seen before
        return None
    kind = sharded_kind(x, device)
    if kind is None:
        return None
    from . import dispatch

    return dispatch.convert(x, kind, to, copy, device, stream, reduce_partial)


def explain_sharded(
    x: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    reduce_partial: bool = False,
) -> ShardedPlan | None:
    """What `convert_sharded` would do, per shard, without moving data (None when `x` is not
    a sharded array). It refuses what convert refuses, with the same errors."""
    if _KINDS.get(type(x), _UNSEEN) is None:
        return None
    kind = sharded_kind(x, device)
    if kind is None:
        return None
    from . import dispatch

    return dispatch.explain(x, kind, to, copy, device, stream, reduce_partial)


def local_shards(x: Any, to: Any = None, *, copy: bool | None = None) -> LocalShards:
    """This process's shards of sharded array `x` as `LocalShards`, in framework `to` (default:
    its own), whatever distributed context exists: the explicit per-shard form."""
    kind = sharded_kind(x)
    if kind is None:
        from .model import UnsupportedShardingError

        raise UnsupportedShardingError(f"a {type(x).__name__} is not a sharded array")
    from . import dispatch

    return dispatch.local(x, kind, to, copy)
