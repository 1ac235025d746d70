"""Sharded arrays: a `jax.Array` over a mesh <-> a torch `DTensor`, shard by shard, zero-copy.

No data moves between processes: each process converts the shards it holds through the
per-tensor `interop.convert`, and the target's own distributed array is rebuilt around them
(`DTensor.from_local`, `jax.make_array_from_single_device_arrays`). Where the target has no
distributed context to rebuild in, the result is `LocalShards` (the shards, their global
indices and devices), never a gather. `interop.convert` and `interop.explain` call
`convert_sharded` / `explain_sharded` first; both return None at once for anything that is
not a sharded array, looking at types only (no framework is imported). Each takes the hub to
convert every shard through (`hub=`, default: `interop.api.HUB`): this package's functions
stand above `interop.api`, which imports only its modules (`kinds`, `dispatch`).

The core is framework-neutral: each framework's side lives in its adapter, behind the
optional `Adapter.sharded()` hook (`interop.adapter.ShardedArrays`: `interop_jax.sharding`,
`interop_torch.sharding`). A type is asked of the adapter that owns it, once; `dispatch`, the
conversion, is imported with the first sharded array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import entry, kinds

if TYPE_CHECKING:
    from ..engine import Calls, Hub
    from .model import (
        LocalShard,
        LocalShards,
        MeshLayout,
        MeshMismatchError,
        PartialPlacementError,
        RemoteShardError,
        ShardingError,
        UnevenShardsError,
        UnsupportedShardingError,
    )
    from .plans import ShardedPlan, ShardPlan

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
    if name in ("ShardPlan", "ShardedPlan"):
        from . import plans

        return getattr(plans, name)
    if name in MODEL_NAMES:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _through(hub: Hub | None) -> Calls:
    """The calls made through `hub` (default: the default hub's), imported when first asked:
    `interop.api` imports this package's modules as it loads."""
    from .. import api

    return api.calls(hub)


def is_sharded(x: Any, *, hub: Hub | None = None) -> bool:
    """Whether `x` is a framework's sharded array (a DTensor, a JAX array over several devices:
    whatever an adapter's `sharded()` hook recognises) or LocalShards."""
    return kinds.is_sharded(x, _through(hub))


def convert_sharded(
    x: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    reduce_partial: bool = False,
    hub: Hub | None = None,
) -> Any:
    """Convert a sharded array shard by shard (None when `x` is not one: see `is_sharded`).

    Into torch: a DTensor when torch.distributed is initialised, one JAX process per rank.
    Into JAX: a global jax.Array with the matching NamedSharding, when JAX has one process
    per torch rank (or the shards came from JAX). Otherwise, or into any other framework:
    `LocalShards`. `device` may be your own DeviceMesh or Mesh to build on. `reduce_partial`
    all-reduces torch Partial placements first (torch's collective, new memory). `hub`: the
    hub each shard is converted through (default: `interop.convert`'s).
    """
    through = _through(hub)
    return entry.convert_sharded(x, to, through, copy, device, stream, reduce_partial)


def explain_sharded(
    x: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    reduce_partial: bool = False,
    hub: Hub | None = None,
) -> ShardedPlan | None:
    """What `convert_sharded` would do, per shard, without moving data (None when `x` is not
    a sharded array). It refuses what convert refuses, with the same errors."""
    through = _through(hub)
    return entry.explain_sharded(x, to, through, copy, device, stream, reduce_partial)


def local_shards(
    x: Any, to: Any = None, *, copy: bool | None = None, hub: Hub | None = None
) -> LocalShards:
    """This process's shards of sharded array `x` as `LocalShards`, in framework `to` (default:
    its own), whatever distributed context exists: the explicit per-shard form."""
    through = _through(hub)
    kind = kinds.sharded_kind(x, through)
    if kind is None:
        from .model import UnsupportedShardingError

        raise UnsupportedShardingError(f"a {type(x).__name__} is not a sharded array")
    from . import dispatch

    return dispatch.local(x, kind, to, copy, through)
