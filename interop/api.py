"""The public calls: convert, explain, inspect, convert_tree, explain_tree, adapters, register,
and the immutable policy; and the one place the default context is built.

The registry (`interop.registry.REGISTRY`), the default `Hub` over it (`HUB`, given the tree's
structure error) and the calls made through it (`CALLS`: convert and explain, which the tree,
gradient and sharding modules take as a parameter) are built here, each handed to the next, so
that a hub made elsewhere governs every call made through it (`calls(hub)`, `hub=`). `convert`
first tries the fast path: a route remembered for this source type and target, taken only when
the tensor's fingerprint is one the full negotiation already approved.
"""

from __future__ import annotations

from inspect import signature
from typing import Any

from . import tree as trees
from .adapter import Adapter
from .capsule import RELEASES
from .engine import Calls, Hub
from .errors import InteropError, UnsupportedTensorError, bare, describe
from .info import TensorInfo
from .plan import Plan, refused_plan
from .readonly import immutable_policy, set_immutable_policy
from .registry import REGISTRY, AdapterInfo, TypeTable
from .sharding import entry, kinds

__all__ = [
    "HUB",
    "adapters",
    "calls",
    "convert",
    "convert_tree",
    "explain",
    "explain_tree",
    "immutable_policy",
    "inspect",
    "make_convert",
    "register",
    "set_immutable_policy",
]


def no_sharded_casts(x: Any, through: Calls) -> None:
    """Checked casts (`dtypes=`) take one buffer; a sharded array is refused, not cast in
    part or exported as one of its shards."""
    if kinds.is_sharded(x, through):
        raise UnsupportedTensorError(
            f"dtypes= casts one-buffer tensors, and this {describe(x)} is sharded: cast it in "
            "its own framework first (x.astype(...)), or convert it without dtypes="
        )


def make_convert(hub: Hub) -> Any:
    """`convert` bound to `hub`: its fast path's front (a remembered route first), then the
    full path. The default instance is `interop.convert`; benchmarks make a pure-Python one."""
    return calls(hub).convert


def calls(hub: Hub | None = None) -> Calls:
    """The calls made through `hub` (default: `HUB`'s, built once): its `convert` (the fast
    path's front, then the full path, sharded arrays shard by shard through it) and `explain`,
    as `convert_tree`, `wrap` and the sharded conversion take them. Built afresh for another
    hub: building costs a few microseconds, no conversion."""
    if hub is None:
        return CALLS
    return CALLS if hub is HUB else _build_calls(hub)


def _build_calls(hub: Hub) -> Calls:
    table = hub.routes.table
    full = hub.convert
    registry = hub.registry

    def slow(x: Any, to: Any, copy: Any, device: Any, stream: Any, dtypes: Any = None) -> Any:
        """The full path: sharded arrays shard by shard (interop.sharding), the rest through
        the hub. Routes are never learned for them, so the fast path never sees them.
        Checked casts (`dtypes=`) take the hub's path, sharded arrays included. An object
        standing for a tensor (a NumPy scalar) goes as that tensor, by its route."""
        stand_in = registry.stand_in(x)
        if stand_in is not None:
            return front(stand_in, to, copy=copy, device=device, stream=stream, dtypes=dtypes)
        if dtypes is None:
            sharded = entry.convert_sharded(x, to, through, copy, device, stream, False)
            if sharded is not None:
                return sharded
        else:
            no_sharded_casts(x, through)
        return full(x, to, copy, device, stream, dtypes=dtypes)

    front = hub.routes.fast.front(table, slow)  # compiled or pure: the hub chose once
    front.__name__ = front.__qualname__ = "convert"
    front.__module__ = __name__
    front.__doc__ = _convert.__doc__
    front.__signature__ = _SIGNATURE

    def explain_one(x: Any, to: Any, **options: Any) -> Plan:
        return explain_through(through, x, to, **options)

    through = Calls(hub, front, explain_one, TypeTable())
    return through


def _convert(
    x: Any,
    to: Any,
    *,
    copy: Any = None,
    device: Any = None,
    stream: Any = None,
    dtypes: Any = None,
) -> Any:
    """Convert tensor `x` (or a DLPack capsule) into framework `to`'s native tensor.

    `copy`: False never copies (raises CopyForbiddenError, a BufferError, instead), None
    copies only when memory cannot be shared, True always returns fresh memory.
    `device`: where the result lives ("cpu", "cuda:1", or a framework's device object).
    `dtypes`: checked narrowing, {source dtype: target dtype} ({"int64": "int32"}): such
    a tensor is copied into the target dtype when every value fits (else CastError).
    """
    raise NotImplementedError  # (its signature and words, which every front carries)


_SIGNATURE = signature(_convert)


#: the default hub: the process's registry, and the tree's error for a structure given where
#: one tensor is asked (it points at convert_tree)
HUB = Hub(REGISTRY, structure_error=lambda x: trees.container_error(x, REGISTRY))
RELEASES.take_boxes_from(HUB.capsule_boxes)  # (the pure runtime's boxes come from an adapter)
#: the calls made through the default hub (`calls`)
CALLS = _build_calls(HUB)
#: convert(x, to, *, copy=None, device=None, stream=None, dtypes=None): tensor `x` (or a DLPack
#: capsule) as framework `to`'s native tensor. copy=False never copies (CopyForbiddenError, a
#: BufferError), None copies only when memory cannot be shared, True always gives fresh memory;
#: dtypes={"int64": "int32"} casts such tensors, checked (CastError when a value does not fit).
convert = CALLS.convert


def explain(
    x: Any,
    to: Any,
    *,
    copy: Any = None,
    device: Any = None,
    stream: Any = None,
    dtypes: Any = None,
) -> Plan:
    """The plan `convert` would follow, without moving data. `str()` of it says why, and
    whether a route remembered from an earlier plan takes the call (the fast path); a cast
    asked by `dtypes=` is a step (its values are checked only when `convert` runs).

    A conversion `convert` refuses is explained, not raised: the plan says refused, why and
    what to do, and `plan.error` is the exception `convert` raises. Malformed arguments
    (`copy="yes"`, an unknown framework, an unreadable `device=`) still raise."""
    return explain_through(CALLS, x, to, copy, device, stream, dtypes)


def explain_through(
    through: Calls,
    x: Any,
    to: Any,
    copy: Any = None,
    device: Any = None,
    stream: Any = None,
    dtypes: Any = None,
) -> Plan:
    """`explain`, made through `through`'s hub."""
    hub = through.hub
    mesh = device is not None and kinds.mesh_hook(device, through) is not None  # (its device=)
    hub.arguments(to, copy, None if mesh else device, stream, dtypes)
    try:
        return _explain(through, x, to, copy, device, stream, dtypes)
    except InteropError as exc:
        return refused_plan(hub.source_name(x), hub.target(to).name, bare(exc))


def _explain(
    through: Calls, x: Any, to: Any, copy: Any, device: Any, stream: Any, dtypes: Any
) -> Plan:
    hub = through.hub
    stand_in = hub.registry.stand_in(x)
    if stand_in is not None:  # (a NumPy scalar: explained as the 0-d array it converts as)
        x = stand_in
    if dtypes is not None:
        no_sharded_casts(x, through)
        return hub.explain(x, to, copy, device, stream, dtypes)  # casts never take a route
    sharded = entry.explain_sharded(x, to, through, copy, device, stream, False)
    if sharded is not None:  # per shard, with the placements' mapping
        return sharded
    plan = hub.explain(x, to, copy, device, stream)
    route = hub.routes.explain(x, to, copy, device, stream, plan)
    return plan if route is None else plan.for_tensor(plan.tensor, route=route)


def inspect(x: Any) -> TensorInfo:
    """Describe a tensor or capsule through DLPack without consuming it."""
    return HUB.inspect(x)


def convert_tree(
    tree: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    unsupported: str = trees.RAISE,
    dtypes: Any = None,
    hub: Hub | None = None,
) -> Any:
    """`tree` with every tensor leaf converted by `interop.convert(leaf, to, ...)`, every other
    leaf returned as it is, and every container rebuilt with its own type.

    `unsupported="keep"` returns tensors the target cannot take (a TensorFlow string tensor,
    a dtype the target lacks) as they are instead of raising. On any failure nothing is
    returned: the error, of the first failing leaf's type, names every failing leaf by path
    (under `copy=False`, every leaf that would need a copy) and has them in `.failures`.
    `dtypes={"int64": "int32"}` casts such leaves, checked: a value that does not fit is a
    CastError naming the leaf, the value and its index. `hub`: the hub every leaf goes
    through, and whose adapters say what a leaf is (default: `interop.convert`'s).
    """
    through = calls(hub)
    return trees.convert_tree(tree, to, through, copy, device, stream, unsupported, dtypes)


def explain_tree(
    tree: Any,
    to: Any,
    *,
    copy: bool | None = None,
    device: Any = None,
    stream: Any = None,
    unsupported: str = trees.RAISE,
    dtypes: Any = None,
    hub: Hub | None = None,
) -> trees.TreePlan:
    """The plan `interop.explain` gives each tensor leaf of `tree`, by path, without moving data.

    Refused leaves are listed, not raised: `plan.refused` says which and why. `hub`: as in
    `convert_tree`.
    """
    through = calls(hub)
    return trees.explain_tree(tree, to, through, copy, device, stream, unsupported, dtypes)


def adapters() -> list[AdapterInfo]:
    """Every adapter known: loaded, broken (with its error), disabled or shadowed."""
    return HUB.registry.infos()


def register(adapter: Adapter, *, replace: bool = False) -> None:
    """Register an adapter at run time, with the same contract as an entry point."""
    HUB.register(adapter, replace=replace)


def accelerated() -> str:
    """Which fast path is active: the compiled one, or pure Python (and why)."""
    from .speedups import WHY

    return WHY
