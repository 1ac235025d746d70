"""Which objects are sharded arrays, by type, asked of the adapter that owns the type once;
and the per-tensor path the sharded conversion runs each shard through.

Below `interop.api`, which hands its per-tensor calls in (`bind`): the sharded conversion is
called by `interop.convert` and calls it in turn for every shard.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from ..registry import REGISTRY, TypeTable
from ..roles import Sharding

if TYPE_CHECKING:
    from ..adapter import ShardedArrays


class PerTensor(NamedTuple):
    """The per-tensor calls each shard goes through (`interop.api`'s)."""

    convert: Any
    explain: Any
    target: Any  # `to` -> its Adapter, with the hub's errors for an unknown or invalid one


#: set by `interop.api` as it loads (`bind`)
PER_TENSOR: PerTensor | None = None


def bind(per_tensor: PerTensor) -> None:
    """Hand the per-tensor path in (called once, by `interop.api`)."""
    global PER_TENSOR
    PER_TENSOR = per_tensor


def per_tensor() -> PerTensor:
    """The bound per-tensor path (`import interop`, which any import of this module runs
    first, binds it)."""
    assert PER_TENSOR is not None, "interop.api binds the per-tensor path as it loads"
    return PER_TENSOR


#: the kind of a `LocalShards`; any other sharded array's kind is its adapter's hook
SHARDS = "shards"
_UNSEEN = "unseen"
#: per type met: SHARDS, the hook (`Adapter.sharded()`) of its framework, or None; weak, so
#: that types made by the thousand are not kept alive by having been converted
_KINDS = TypeTable()


def hook_of(adapter: Any) -> ShardedArrays | None:
    """`adapter`'s sharded-array hook, or None (no adapter, or one not declaring `Sharding`)."""
    return adapter.sharded() if isinstance(adapter, Sharding) else None


def _classify(x: Any) -> Any:
    """Asks the adapter owning `x` (its framework is imported: `x` exists) whether its type
    is a distributed array; LocalShards exist only once the model is loaded."""
    cls = type(x)
    kind: Any = None
    model = sys.modules.get(f"{__package__}.model")
    if model is not None and issubclass(cls, model.LocalShards):
        kind = SHARDS
    else:
        hook = hook_of(REGISTRY.detect(x))
        if hook is not None and hook.is_array_type(cls):
            kind = hook
    _KINDS.set(cls, kind)  # a type never changes kind: its framework was imported to make it
    return kind


def mesh_hook(device: Any) -> ShardedArrays | None:
    """The hook of the framework whose mesh `device` is (asked of its module's adapter)."""
    root = (getattr(type(device), "__module__", None) or "").partition(".")[0]
    hook = hook_of(REGISTRY.detect_module(root))
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
