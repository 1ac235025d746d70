"""Which objects are sharded arrays, by type, asked of the adapter that owns the type once.

Below `interop.api`, which passes the calls made through its hub (`Calls`: the per-tensor
convert and explain each shard goes through, and the hub's registry) to every function here.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..engine import Calls
from ..roles import Sharding

if TYPE_CHECKING:
    from ..adapter import ShardedArrays


#: the kind of a `LocalShards`; any other sharded array's kind is its adapter's hook
SHARDS = "shards"
#: not in `Calls.kinds` yet, which holds per type met: SHARDS, the hook (`Adapter.sharded()`)
#: of its framework, or None; weakly, so that types made by the thousand are not kept alive
_UNSEEN = "unseen"


def hook_of(adapter: Any) -> ShardedArrays | None:
    """`adapter`'s sharded-array hook, or None (no adapter, or one not declaring `Sharding`)."""
    return adapter.sharded() if isinstance(adapter, Sharding) else None


def _classify(x: Any, through: Calls) -> Any:
    """Asks the adapter owning `x` (its framework is imported: `x` exists) whether its type
    is a distributed array; LocalShards exist only once the model is loaded."""
    cls = type(x)
    kind: Any = None
    model = sys.modules.get(f"{__package__}.model")
    if model is not None and issubclass(cls, model.LocalShards):
        kind = SHARDS
    else:
        hook = hook_of(through.hub.registry.detect(x))
        if hook is not None and hook.is_array_type(cls):
            kind = hook
    through.kinds.set(cls, kind)  # a type never changes kind: its framework made it
    return kind


def mesh_hook(device: Any, through: Calls) -> ShardedArrays | None:
    """The hook of the framework whose mesh `device` is (asked of its module's adapter)."""
    root = (getattr(type(device), "__module__", None) or "").partition(".")[0]
    hook = hook_of(through.hub.registry.detect_module(root))
    return hook if hook is not None and hook.is_mesh(device) else None


def sharded_kind(x: Any, through: Calls, device: Any = None) -> Any:
    """The hook of `x`'s framework when `x` is one of its sharded arrays, "shards" for
    LocalShards, None for anything else (fast)."""
    kind = through.kinds.get(type(x), _UNSEEN)
    if kind is None:
        return None
    if kind is _UNSEEN:
        kind = _classify(x, through)
    if kind is None or kind is SHARDS:
        return kind
    # a one-device array is a plain one, unless another framework's mesh is asked for
    asked = device is not None and mesh_hook(device, through) not in (None, kind)
    return kind if kind.is_sharded(x, asked) else None


def is_sharded(x: Any, through: Calls) -> bool:
    """Whether `x` is a framework's sharded array (a DTensor, a JAX array over several devices:
    whatever an adapter's `sharded()` hook recognises) or LocalShards."""
    return sharded_kind(x, through) is not None
