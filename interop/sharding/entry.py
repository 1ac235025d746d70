"""The entry of the sharded conversion: a hub's `convert` and `explain` call these first, and
they call the hub's per-tensor calls in turn for every shard (`Calls`, passed by `interop.api`).
`dispatch`, the conversion, is imported with the first sharded array."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine import Calls
from .kinds import _UNSEEN, sharded_kind

if TYPE_CHECKING:
    from .plans import ShardedPlan


def _kind(x: Any, through: Calls, device: Any) -> Any:
    """`x`'s sharded kind (`sharded_kind`), or None: the hot path, a plain tensor type seen
    before, costs one lookup."""
    if through.kinds.get(type(x), _UNSEEN) is None:
        return None
    return sharded_kind(x, through, device)


def convert_sharded(
    x: Any, to: Any, through: Calls, copy: Any, device: Any, stream: Any, reduce_partial: bool
) -> Any:
    """`x` converted shard by shard through `through` (None when `x` is not a sharded array)."""
    kind = _kind(x, through, device)
    if kind is None:
        return None
    from . import dispatch

    return dispatch.convert(x, kind, to, copy, device, stream, reduce_partial, through)


def explain_sharded(
    x: Any, to: Any, through: Calls, copy: Any, device: Any, stream: Any, reduce_partial: bool
) -> ShardedPlan | None:
    """What `convert_sharded` would do, per shard (None when `x` is not a sharded array)."""
    kind = _kind(x, through, device)
    if kind is None:
        return None
    from . import dispatch

    return dispatch.explain(x, kind, to, copy, device, stream, reduce_partial, through)
