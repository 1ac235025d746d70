"""The public calls: convert, explain, inspect, adapters, register."""

from __future__ import annotations

import types
from typing import Any

from . import capsule as cap
from . import dlpack as dl
from . import sources
from .adapter import (
    CAPSULE,
    CAPSULE_VERSIONED,
    IMMUTABLE,
    OBJECT,
    OBJECT_LEGACY,
    WRITABLE,
    Adapter,
    Capabilities,
)
from .errors import (
    CopyForbiddenError,
    DeviceError,
    InteropError,
    UnknownFrameworkError,
    UnsupportedTensorError,
)
from .exchange import Exchange
from .info import Device, TensorInfo, read_capsule
from .plan import (
    AT_IMPORT,
    AT_INTERMEDIARY,
    AT_SOURCE,
    MOVE_AT_SOURCE,
    MOVE_AT_TARGET,
    MOVE_ON_IMPORT,
    Plan,
    identity_plan,
    negotiate,
)
from .registry import REGISTRY, AdapterInfo

CAPSULE_SOURCE = "DLPack capsule"
Copy = bool | None

_PLANS: dict[tuple[Any, ...], Plan] = {}
_TARGETS: dict[str, Adapter] = {}


def _target(to: Any) -> Adapter:
    if isinstance(to, str):
        found = _TARGETS.get(to)
        if found is None:
            found = _TARGETS[to] = REGISTRY.get(to)
        return found
    if isinstance(to, Adapter):
        return to
    if isinstance(to, types.ModuleType):
        return REGISTRY.for_module(to)
    raise UnknownFrameworkError(
        f"`to` must be a framework name, module or Adapter, not {type(to).__name__}"
    )


def _device(device: Any) -> Device | None:
    if device is None or isinstance(device, Device):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        kind = {"gpu": "cuda"}.get(kind.lower(), kind.lower())
        if kind not in dl.DEVICE_CODES:
            raise DeviceError(f"unknown device {device!r}; known types: {sorted(dl.DEVICE_CODES)}")
        return Device(kind, int(index or 0))
    if isinstance(device, tuple) and len(device) == 2:
        return Device(dl.device_name(int(device[0])), int(device[1]))
    raise DeviceError(f"cannot read {device!r} as a device (use 'cpu', 'cuda:0' or a Device)")


def _source(x: Any) -> tuple[Adapter | None, str, Capabilities | None, Any]:
    """(adapter, source name, its capabilities, the object to export from)."""
    adapter = REGISTRY.detect(x)
    if adapter is not None:
        return adapter, adapter.name, adapter.capabilities(), x
    if cap.is_capsule(x):
        return None, CAPSULE_SOURCE, None, x
    producer = sources.as_producer(x)  # buffers, array interfaces, Arrow: None if none of them
    if producer is not None:
        return None, producer.name, None, producer
    if hasattr(x, "__dlpack__"):
        kind = type(x)
        return None, f"{kind.__module__}.{kind.__qualname__}", None, x
    from .tree import container_error  # dicts, lists, tuples of tensors: convert_tree

    raise container_error(x) or UnsupportedTensorError(
        f"cannot convert a {type(x).__module__}.{type(x).__qualname__}: no installed adapter owns "
        f"it and it has no __dlpack__ (installed adapters: "
        f"{', '.join(a.name for a in REGISTRY.loaded()) or 'none'})"
    )


def _stream(source: Any, target: Adapter, stream: Any) -> Any:
    """The stream to hand the producer: only for stream devices, never an implicit None."""
    device_of = getattr(source, "__dlpack_device__", None)
    if device_of is None:
        return None
    code, index = device_of()
    name = dl.device_name(code)
    if name not in dl.STREAM_DEVICES:
        return None
    if stream is not None:
        return stream
    chosen = target.consumer_stream(Device(name, index))
    return 1 if chosen is None else chosen  # 1: the legacy default stream, said explicitly


def _export(source: Any, name: str, versioned: bool, stream: Any = None) -> Exchange:
    """The producer's capsule, held and described; its own failures become typed errors."""
    try:
        try:
            return Exchange.from_source(source, versioned=versioned, stream=stream, framework=name)
        except BufferError:
            if versioned or cap.is_capsule(source):
                raise
            # NumPy refuses legacy capsules of read-only arrays: ask for a versioned one.
            return Exchange.from_source(source, versioned=True, stream=stream, framework=name)
    except InteropError:
        raise
    except Exception as exc:  # the producer's own refusal, as a typed error naming it
        raise UnsupportedTensorError(
            f"{name} could not export this tensor through DLPack: {type(exc).__name__}: {exc}"
        ) from exc


def _take(
    x: Any,
    adapter: Adapter | None,
    name: str,
    target: Adapter,
    tcaps: Capabilities,
    scaps: Capabilities | None,
    stream: Any,
) -> Exchange:
    versioned = tcaps.wants_versioned
    source = adapter.export(x, writable=tcaps.import_access == WRITABLE) if adapter else x
    if (
        tcaps.cpu_only  # a GPU source fails or moves through its own framework's copy
        or (scaps is not None and (scaps.cpu_only or adapter.on_cpu(x)))  # type: ignore[union-attr]
        or cap.is_capsule(source)
    ):
        chosen = None  # no stream to order
    else:
        chosen = _stream(source, target, stream)
    exchange = _export(source, name, versioned, chosen)
    exchange.immutable = bool(scaps and scaps.immutable)
    exchange.legacy_read_only_ok = tcaps.import_access == IMMUTABLE or tcaps.legacy_import_read_only
    exchange.legacy_marks_read_only = tcaps.legacy_import_read_only
    return exchange


def _intermediary(info: TensorInfo, target: Adapter) -> str | None:
    """A framework that can import this capsule as it is and copy it, preferring NumPy."""
    candidates = sorted(REGISTRY.loaded(), key=lambda a: a.name != "numpy")
    for adapter in candidates:
        caps = adapter.capabilities()
        if (
            adapter is not target
            and adapter.imported()  # never import a framework the program did not
            and info.dtype in caps.import_dtypes
            and info.dtype in caps.export_dtypes
            and info.device.type in caps.devices
            and not adapter.device_unavailable(info.device)
            and caps.accepts_layout(info.layout)
        ):
            return adapter.name
    return None


def _plan(
    adapter: Adapter | None,
    name: str,
    scaps: Capabilities | None,
    info: TensorInfo,
    target: Adapter,
    tcaps: Capabilities,
    copy: Copy,
    device: Device | None,
) -> Plan:
    align = tcaps.import_alignment
    key = (
        name,
        target.name,
        id(scaps),
        id(tcaps),
        info.dtype,
        info.device,
        info.layout,
        info.read_only,
        bool(info.byte_offset),
        align > 1 and info.address % align != 0,
        info.size == 0,
        copy,
        device,
    )
    plan = _PLANS.get(key)
    if plan is None:
        plan = negotiate(
            name,
            scaps,
            info,
            target,
            tcaps,
            copy=copy,
            device=device,
            can_copy_at_source=adapter is not None,
            intermediary=None if adapter is not None else _intermediary(info, target),
        )
        _PLANS[key] = plan
    return plan


def _deliver(exchange: Exchange, target: Adapter, tcaps: Capabilities) -> Any:
    imports = tcaps.imports
    if exchange.versioned and CAPSULE_VERSIONED in imports:
        return target.from_dlpack(exchange.take())
    if not exchange.versioned and CAPSULE in imports:
        return target.from_dlpack(exchange.take())
    if OBJECT in imports or OBJECT_LEGACY in imports:
        return target.from_dlpack(exchange)
    return target.from_dlpack(exchange.take_as(not exchange.versioned))


def _same_framework(x: Any, adapter: Adapter, copy: Copy, device: Device | None) -> Any:
    if device is not None:
        info = inspect(x)
        if info.device != device:
            missing = adapter.device_unavailable(device)
            if missing:
                raise DeviceError(f"{adapter.name} cannot move a tensor to {device}: {missing}")
            if copy is False:
                raise CopyForbiddenError(
                    f"copy=False, but the {adapter.name} tensor is on {info.device} and "
                    f"{device} was asked for"
                )
            return adapter.to_device(x, device)
    return adapter.copy(x) if copy else x


def convert(x: Any, to: Any, *, copy: Copy = None, device: Any = None, stream: Any = None) -> Any:
    """Convert tensor `x` (or a DLPack capsule) into framework `to`'s native tensor.

    `copy`: False never copies (raises CopyForbiddenError, a BufferError, instead), None copies
    only when memory cannot be shared, True always returns fresh memory.
    """
    target = _target(to)
    dev = _device(device)
    adapter, name, scaps, x = _source(x)
    if adapter is target:
        return _same_framework(x, target, copy, dev)
    tcaps = target.capabilities()
    exchange = _take(x, adapter, name, target, tcaps, scaps, stream)
    plan = _plan(adapter, name, scaps, exchange.info, target, tcaps, copy, dev)
    if plan.copy_at == MOVE_ON_IMPORT:
        assert plan.target_device is not None
        return target.from_dlpack_to(exchange, plan.target_device)
    if plan.copy_at not in (None, AT_IMPORT, MOVE_AT_TARGET):
        exchange.release()
        if plan.copy_at == AT_SOURCE:
            assert adapter is not None
            fresh, owner = adapter.copy(x), adapter
        elif plan.copy_at == MOVE_AT_SOURCE:
            assert adapter is not None and plan.target_device is not None
            fresh = adapter.to_device(x, plan.target_device)
            owner = REGISTRY.detect(fresh) or adapter  # CuPy moves to the host as NumPy
        else:
            assert plan.copy_at == AT_INTERMEDIARY and plan.intermediary is not None
            owner = REGISTRY.get(plan.intermediary)
            inner = _take(x, None, name, owner, owner.capabilities(), None, stream)
            fresh = owner.copy(_deliver(inner, owner, owner.capabilities()))
        exchange = _take(fresh, owner, owner.name, target, tcaps, owner.capabilities(), stream)
    result = _deliver(exchange, target, tcaps)
    if plan.target_device is not None and plan.copy_at != MOVE_AT_SOURCE:
        result = target.to_device(result, plan.target_device)
    return result


def explain(x: Any, to: Any, *, copy: Copy = None, device: Any = None, stream: Any = None) -> Plan:
    """The plan `convert` would follow, without moving data. `str()` of it says why."""
    target = _target(to)
    dev = _device(device)
    adapter, name, scaps, x = _source(x)
    if adapter is target:
        return identity_plan(target, inspect(x), copy)
    tcaps = target.capabilities()
    exchange = _take(x, adapter, name, target, tcaps, scaps, stream)
    try:
        plan = _plan(adapter, name, scaps, exchange.info, target, tcaps, copy, dev)
    finally:
        exchange.release()
    return plan.with_notes(adapter.export_notes(x) if adapter else ())


def inspect(x: Any) -> TensorInfo:
    """Describe a tensor or capsule through DLPack without consuming it."""
    adapter, name, scaps, x = _source(x)
    if cap.is_capsule(x):
        return read_capsule(x, CAPSULE_SOURCE)
    exchange = _export(adapter.export(x) if adapter else x, name, versioned=True)
    exchange.release()
    info = exchange.info
    if scaps is not None and scaps.immutable and not info.read_only:
        info = info._replace(read_only=True)
    return info


def adapters() -> list[AdapterInfo]:
    """Every adapter known: loaded, broken (with its error), disabled or shadowed."""
    return REGISTRY.infos()


def register(adapter: Adapter, *, replace: bool = False) -> None:
    """Register an adapter at run time, with the same contract as an entry point."""
    REGISTRY.register(adapter, replace=replace)
    _PLANS.clear()
    _TARGETS.clear()
