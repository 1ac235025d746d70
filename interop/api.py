"""The public calls: convert, explain, inspect, adapters, register, and the immutable policy.

Each delegates to the default `Hub` (interop.engine). `convert` first tries the fast path: a
route remembered for this source type and target, taken only when the tensor's fingerprint is
one the full negotiation already approved.
"""

from __future__ import annotations

from inspect import signature
from typing import Any

from .adapter import Adapter
from .capsule import RELEASES
from .engine import Hub
from .errors import InteropError, UnsupportedTensorError, bare, describe
from .info import TensorInfo
from .plan import Plan, refused_plan
from .readonly import immutable_policy, set_immutable_policy
from .registry import REGISTRY, AdapterInfo
from .sharding import convert_sharded, explain_sharded, is_sharded
from .sharding.kinds import PerTensor, bind, mesh_hook

__all__ = [
    "HUB",
    "adapters",
    "convert",
    "explain",
    "immutable_policy",
    "inspect",
    "make_convert",
    "register",
    "set_immutable_policy",
]


def no_sharded_casts(x: Any) -> None:
    """Checked casts (`dtypes=`) take one buffer; a sharded array is refused, not cast in
    part or exported as one of its shards."""
    if is_sharded(x):
        raise UnsupportedTensorError(
            f"dtypes= casts one-buffer tensors, and this {describe(x)} is sharded: cast it in "
            "its own framework first (x.astype(...)), or convert it without dtypes="
        )


def make_convert(hub: Hub) -> Any:
    """`convert` bound to `hub`: its fast path's front (a remembered route first), then the
    full path. The default instance is `interop.convert`; benchmarks make a pure-Python one."""
    table = hub.routes.table
    full = hub.convert

    def slow(x: Any, to: Any, copy: Any, device: Any, stream: Any, dtypes: Any = None) -> Any:
        """The full path: sharded arrays shard by shard (interop.sharding), the rest through
        the hub. Routes are never learned for them, so the fast path never sees them.
        Checked casts (`dtypes=`) take the hub's path, sharded arrays included."""
        if dtypes is None:
            sharded = convert_sharded(x, to, copy=copy, device=device, stream=stream)
            if sharded is not None:
                return sharded
        else:
            no_sharded_casts(x)
        return full(x, to, copy, device, stream, dtypes=dtypes)

    front = hub.routes.fast.front(table, slow)  # compiled or pure: the hub chose once
    front.__name__ = front.__qualname__ = "convert"
    front.__module__ = __name__
    front.__doc__ = _convert.__doc__
    front.__signature__ = signature(_convert)
    return front


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


HUB = Hub(REGISTRY)
RELEASES.find_boxes = HUB.capsule_boxes  # (the pure runtime's boxes come from an adapter)
#: convert(x, to, *, copy=None, device=None, stream=None, dtypes=None): tensor `x` (or a DLPack
#: capsule) as framework `to`'s native tensor. copy=False never copies (CopyForbiddenError, a
#: BufferError), None copies only when memory cannot be shared, True always gives fresh memory;
#: dtypes={"int64": "int32"} casts such tensors, checked (CastError when a value does not fit).
convert = make_convert(HUB)


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
    mesh = device is not None and mesh_hook(device) is not None  # (sharded arrays' device=)
    HUB.arguments(to, copy, None if mesh else device, stream, dtypes)
    try:
        return _explain(x, to, copy, device, stream, dtypes)
    except InteropError as exc:
        return refused_plan(HUB.source_name(x), HUB.target(to).name, bare(exc))


def _explain(x: Any, to: Any, copy: Any, device: Any, stream: Any, dtypes: Any) -> Plan:
    if dtypes is not None:
        no_sharded_casts(x)
        return HUB.explain(x, to, copy, device, stream, dtypes)  # casts never take a route
    sharded = explain_sharded(x, to, copy=copy, device=device, stream=stream)
    if sharded is not None:  # per shard, with the placements' mapping
        return sharded
    plan = HUB.explain(x, to, copy, device, stream)
    route = HUB.routes.explain(x, to, copy, device, stream, plan)
    return plan if route is None else plan.for_tensor(plan.tensor, route=route)


bind(PerTensor(convert, explain, HUB.target))  # the path each shard of a sharded array takes


def inspect(x: Any) -> TensorInfo:
    """Describe a tensor or capsule through DLPack without consuming it."""
    return HUB.inspect(x)


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
