"""Sharded arrays: a `jax.Array` over a mesh <-> a torch `DTensor`, shard by shard, zero-copy.

No data moves between processes: each process converts the shards it holds through the
per-tensor `interop.convert`, and the target's own distributed array is rebuilt around them
(`DTensor.from_local`, `jax.make_array_from_single_device_arrays`). Where the target has no
distributed context to rebuild in, the result is `LocalShards` (the shards, their global
indices and devices), never a gather. `interop.convert` and `interop.explain` call
`convert_sharded` / `explain_sharded` first; both return None at once for anything that is
not a sharded array, looking at types only (no framework is imported).

The core is framework-neutral: each framework's side lives in its adapter, behind the
optional `Adapter.sharded()` hook (`interop.adapter.ShardedArrays`: `interop_jax.sharding`,
`interop_torch.sharding`). A type is asked of the adapter that owns it, once; `dispatch`, the
conversion, is imported with the first sharded array.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..registry import TypeTable

if TYPE_CHECKING:
    from ..adapter import ShardedArrays
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


#: the kind of a `LocalShards`; any other sharded array's kind is its adapter's hook
SHARDS = "shards"
_UNSEEN = "unseen"
#: per type met: SHARDS, the hook (`Adapter.sharded()`) of its framework, or None; weak, so
#: that types made by the thousand are not kept alive by having been converted
_KINDS = TypeTable()


def hook_of(adapter: Any) -> ShardedArrays | None:
    """`adapter`'s sharded-array hook, or None (no adapter, or a contract 1.0 one)."""
    sharded = getattr(adapter, "sharded", None)
    return sharded() if sharded is not None else None


def _classify(x: Any) -> Any:
    """Asks the adapter owning `x` (its framework is imported: `x` exists) whether its type
    is a distributed array; LocalShards exist only once the model is loaded."""
    from ..api import HUB

    cls = type(x)
    kind: Any = None
    model = sys.modules.get(f"{__name__}.model")
    if model is not None and issubclass(cls, model.LocalShards):
        kind = SHARDS
    else:
        hook = hook_of(HUB.registry.detect(x))
        if hook is not None and hook.is_array_type(cls):
            kind = hook
    _KINDS.set(cls, kind)  # a type never changes kind: its framework was imported to make it
    return kind


def mesh_hook(device: Any) -> ShardedArrays | None:
    """The hook of the framework whose mesh `device` is (asked of its module's adapter)."""
    from ..api import HUB

    root = (getattr(type(device), "__module__", None) or "").partition(".")[0]
    hook = hook_of(HUB.registry.detect_module(root))
    return hook if hook is not None and hook.is_mesh(device) else None


def sharded_kind(x: Any, device: Any = None) -> Any:
    """The hook of `x`'s framework when `x` is one of its sharded arrays, "shards" for
    LocalShards, None for anything else (fast)."""
    kind = _KINDS.get(type(x), _UNSEEN)
    if kind is None:
        return None
    if kind is _UNSEEN:
        kind = _classify(x)
    if kind is None or kind is SHARDS:
        return kind
    # a one-device array is a plain one, unless another framework's mesh is asked for
    asked = device is not None and mesh_hook(device) not in (None, kind)
    return kind if kind.is_sharded(x, asked) else None


def is_sharded(x: Any) -> bool:
    """Whether `x` is a framework's sharded array (a DTensor, a JAX array over several devices:
    whatever an adapter's `sharded()` hook recognises) or LocalShards."""
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
