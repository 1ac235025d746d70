"""The hub: one object holding the registry, the plan cache, the fast-path routes and what the
core knows about read-only memory, with the full conversion path that plans and runs.

`interop.convert` and friends delegate to a default instance; tests can make a fresh `Hub`
instead of mutating globals. (The capsule keep-alive tables stay process-wide in
`interop.capsule`: capsules outlive any hub and their deleters are called by foreign code.)
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace as with_fields
from typing import Any, NamedTuple

from . import capsule as cap
from . import dlpack as dl
from . import readonly, sources, streams
from .adapter import Adapter, Capabilities
from .errors import (
    AdapterError,
    DeviceError,
    DLPackError,
    FrameworkNotInstalledError,
    InteropError,
    InvalidArgumentError,
    UnsupportedTensorError,
    builtin_kind,
    describe,
)
from .exchange import Exchange
from .info import Device, TensorInfo, read_capsule
from .plan import (
    Bridge,
    Capsule,
    Cast,
    CopyAtSource,
    Export,
    Facts,
    Import,
    ImportOnto,
    MoveAtSource,
    MoveAtTarget,
    Plan,
    Rewrap,
    RouteChoice,
    SameFramework,
    Step,
    choose_route,
    delivery,
    export_step,
    ndim_refusal,
    negotiate,
    negotiate_cast,
    same_framework_plan,
)
from .registry import Registry, TypeTable
from .roles import AlignedAllocator, CapsuleBoxes, HostCopier
from .routes import Routes

CAPSULE_SOURCE = "DLPack capsule"


def copy_flag(copy: Any) -> bool | None:
    """`copy` as None, True or False (NumPy booleans count as theirs); anything else is refused:
    `copy=1` must not pass for True in one place and for None in another."""
    if copy is None or copy is True or copy is False:
        return copy
    if type(copy).__name__ in ("bool", "bool_") and type(copy).__module__ == "numpy":  # 2.x, 1.x
        return bool(copy)
    raise InvalidArgumentError(f"copy must be None, True or False, not {copy!r}")


CORE_DEVICES = "'cpu', 'cuda:1', ('cuda', 1), (2, 1) (DLPack's device type code), an interop.Device"


def parse_device(device: Any, adapters: Iterable[Adapter] = ()) -> Device | None:
    """A `device=` argument as a Device: the core's own spellings ("cpu", "cuda:1", ("cuda", 1),
    (2, 1) or a Device), else a device object or spelling of a framework, read by the first of
    `adapters` (those of imported frameworks) whose `parse_device` hook knows it, so that
    `torch.device("cpu")` works as it does in `torch.from_dlpack`."""
    if device is None or isinstance(device, Device):
        return device
    refusal: DeviceError | None = None
    try:
        found = _core_device(device)
    except DeviceError as exc:  # "/device:CPU:0" is TensorFlow's: its adapter may read it
        refusal, found = exc, None
    if found is not None:
        return found
    asked = []
    for adapter in adapters:
        if not adapter.imported():  # never import a framework to read a device
            continue
        asked.append(adapter)
        try:
            answer = adapter.parse_device(device)
        except InteropError:
            raise
        except Exception as exc:  # the hook's own failure, named
            raise DeviceError(
                f"the {adapter.name} adapter failed to read {device!r} as a device: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if answer is None:
            continue
        if not isinstance(answer, Device):
            raise AdapterError(
                f"{type(adapter).__name__}.parse_device({device!r}) returned {answer!r}, "
                "not an interop.Device or None"
            )
        return answer
    if refusal is not None:
        raise refusal
    examples = "; ".join(
        f"{adapter.name}: {', '.join(adapter.device_examples)}"
        for adapter in asked
        if adapter.device_examples
    )
    theirs = (
        f"or a device object of an imported framework ({examples})"
        if examples
        else "or a device object of a framework the program imported (none is)"
    )
    raise DeviceError(
        f"cannot read {device!r} ({describe(device)}) as a device; device= takes "
        f"{CORE_DEVICES}, {theirs}"
    )


def _core_device(device: Any) -> Device | None:
    """The core's own spellings as a Device; None for anything else (a framework's object).
    A malformed string raises DeviceError."""
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        kind = {"gpu": "cuda"}.get(kind.strip().lower(), kind.strip().lower())
        if kind not in dl.DEVICE_CODES:
            raise DeviceError(f"unknown device {device!r}; known types: {sorted(dl.DEVICE_CODES)}")
        if index and not index.strip().isdigit():
            raise DeviceError(f"device {device!r} has no valid index (write e.g. '{kind}:0')")
        return Device(kind, int(index or 0))
    if isinstance(device, tuple) and len(device) == 2:
        named, index = device
        code = dl.DEVICE_CODES.get(named.lower(), -1) if isinstance(named, str) else named
        if (
            isinstance(code, int)
            and isinstance(index, int)
            and not isinstance(code, bool)
            and not isinstance(index, bool)
            and code in dl.DEVICE_NAMES
            and index >= 0
        ):
            return Device(dl.DEVICE_NAMES[code], index)
    return None


def cast_table(dtypes: Any) -> dict[str, str] | None:
    """`dtypes=` as {source dtype name: target dtype name}, names as DLPack's ("int64"); the
    frameworks' dtypes (np.int64, torch.int64, tf.int64, ...) and names such as "torch.int64"
    are read too."""
    if dtypes is None:
        return None
    if not isinstance(dtypes, Mapping):
        raise InvalidArgumentError(
            f"dtypes must map source dtype names to target ones, e.g. {{'int64': 'int32'}}, "
            f"not {describe(dtypes)}"
        )
    from .grad.structure import dtype_name  # the spellings `interop.wrap` reads

    def name(dtype: Any) -> str:
        try:
            named = dtype.__name__ if isinstance(dtype, type) else dtype  # np.int64, jnp.int32
            spelled = dtype_name(named).rpartition(".")[2].lower()  # "paddle.int64" too
        except Exception:
            spelled = ""
        if spelled not in dl.DTYPE_CODES:
            raise InvalidArgumentError(
                f"dtypes={dict(dtypes)!r}: {dtype!r} is not a dtype name (known: "
                f"{', '.join(sorted(dl.DTYPE_CODES))})"
            )
        return spelled

    return {name(source): name(target) for source, target in dtypes.items()}


def producer_device(obj: Any) -> Device:
    """A DLPack producer's `__dlpack_device__()`, checked: its failures are typed errors."""
    name = describe(obj)
    try:
        answer = obj.__dlpack_device__()
    except InteropError:
        raise
    except Exception as exc:
        raise DLPackError(
            f"{name}.__dlpack_device__() failed: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(answer, tuple) and len(answer) == 2 and answer[1] is None and answer[0] == 1:
        answer = (1, 0)  # Paddle says (kDLCPU, None): NumPy, torch and Paddle read the host
    if (
        not isinstance(answer, tuple)
        or len(answer) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in answer)
    ):
        raise DLPackError(
            f"{name}.__dlpack_device__() returned {answer!r}, not a (device type, id) pair"
        )
    code, index = answer
    return Device(dl.device_name(int(code)), int(index))


def adapter_export(adapter: Adapter, x: Any, writable: bool = False) -> Any:
    """`adapter.export(x)`, where a framework's own failure (MXNet raising, when waited on, the
    error of an operation still pending on the array) becomes a typed error naming it, of the
    failure's builtin class."""
    try:
        return adapter.export(x, writable=writable)
    except (InteropError, MemoryError):
        raise
    except Exception as exc:
        raise builtin_kind(exc, UnsupportedTensorError)(
            f"{adapter.name} could not export this tensor, raising its own error (which "
            f"reading the tensor in {adapter.name} raises too): {type(exc).__name__}: {exc}"
        ) from exc


class Conversion:
    """One conversion in progress: what the plan's steps read and change."""

    __slots__ = (
        "adapter",
        "exchange",
        "exported",
        "hub",
        "key",
        "name",
        "result",
        "target",
        "tcaps",
        "x",
    )

    def __init__(
        self,
        hub: Hub,
        x: Any,
        adapter: Adapter | None,
        name: str,
        target: Adapter,
        tcaps: Capabilities,
    ) -> None:
        self.hub, self.x, self.adapter, self.name = hub, x, adapter, name
        self.target, self.tcaps = target, tcaps
        self.exchange: Exchange | None = None
        self.result: Any = None
        #: the compiled fingerprint of the first capsule (compiled mode), for learning routes
        self.key = -1
        #: the first capsule's description, as exported (later steps re-wrap or bridge it)
        self.exported: TensorInfo | None = None

    def export(self, x: Any, step: Export, adapter: Adapter | None = None) -> Exchange:
        adapter = self.adapter if adapter is None else adapter
        source = adapter_export(adapter, x, writable=self.tcaps.writes) if adapter else x
        exchange = self.hub.take(source, adapter.name if adapter else self.name, step)
        if adapter is not None and cap.gil_first_between(
            adapter, self.target, isinstance(self.target, CapsuleBoxes)
        ):
            exchange.hold(cap.gil_first(exchange.take()))
        return exchange

    def copy_at_source(self, step: CopyAtSource) -> None:
        if step.numpy:
            assert self.exchange is not None
            copier = self.hub.host_copier()
            self.exchange = host_copy(copier, self.exchange, step.export.versioned, None)
            return
        if self.exchange is not None:
            self.exchange.release()
        if self.adapter is not None:
            fresh, owner = self.adapter.copy(self.x), self.adapter
        else:  # a capsule or unknown producer: the intermediary imports and copies it
            owner = self.hub.registry.get(step.where)
            inner = self.hub.take(
                self.x, self.name, Export(self.name, versioned=owner.capabilities().wants_versioned)
            )
            fresh = owner.copy(owner.from_dlpack(inner))
        self.exchange = self.export(fresh, step.export, owner)

    def cast(self, step: Cast) -> None:
        assert self.exchange is not None
        copier = self.hub.host_copier()
        self.exchange = host_copy(copier, self.exchange, step.export.versioned, step.dtype)

    def move_at_source(self, step: MoveAtSource) -> None:
        assert self.adapter is not None and self.exchange is not None
        self.exchange.release()
        fresh = self.adapter.to_device(self.x, step.device)
        owner = self.hub.registry.detect(fresh) or self.adapter  # CuPy moves to the host as NumPy
        self.exchange = self.export(fresh, step.export, owner)

    def rewrap(self, step: Rewrap) -> None:
        assert self.exchange is not None
        self.exchange.hold(cap.rewrap(self.exchange.take(), defer=step.defer, claim=step.claim))

    def bridge(self, step: Bridge) -> None:
        assert self.exchange is not None
        capsule = self.exchange.take_as(
            step.versioned, read_only=step.read_only, legacy_read_only_ok=step.legacy_read_only_ok
        )
        self.exchange.hold(capsule)

    def import_(self, step: Import) -> None:
        assert self.exchange is not None
        source = self.exchange if step.as_object else self.exchange.take()
        self.result = self.target.from_dlpack(source)
        if step.writable:
            self.result = self.target.make_writable(self.result)

    def import_onto(self, step: ImportOnto) -> None:
        self.result = self.target.from_dlpack_to(self.exchange, step.device)

    def move_at_target(self, step: MoveAtTarget) -> None:
        self.result = self.target.to_device(self.result, step.device)

    def same_framework(self, step: SameFramework) -> None:
        if step.device is not None:
            self.result = self.target.to_device(self.x, step.device)
        elif step.copy:
            self.result = self.target.copy(self.x)
        else:
            self.result = self.x


def host_copy(copier: Any, exchange: Exchange, versioned: bool, dtype: str | None) -> Exchange:
    """A compact, 64-byte aligned copy of a CPU tensor, made over its DLPack memory by the
    copier's `host_copy` hook (NumPy's adapter: `host_copier`), in `dtype` if given (a
    checked cast)."""
    info = exchange.info
    if copier is None:
        raise FrameworkNotInstalledError(
            f"copying this {info.dtype} tensor from {info.framework} on the host (a checked "
            "cast, dtypes=) needs an adapter declaring the HostCopier role: pip install "
            "interop-numpy"
        )
    fresh = copier.host_copy(exchange, dtype)
    copied = Exchange.from_source(fresh, versioned=versioned, framework=info.framework)
    if dtype is None and copied.info.dtype != info.dtype:  # bfloat16 copied as uint16, ...
        copied.retag(info.dtype)
    return copied


def no_structure_hint(x: Any) -> UnsupportedTensorError | None:
    """What `convert(structure)` raises instead of a plain refusal, for a hub built without a
    `structure_error` (the default hub's points at convert_tree: `interop.api`)."""
    return None


def host_copier(registry: Registry) -> HostCopier | None:
    """The adapter declaring `HostCopier`, which copies host tensors over their DLPack memory
    (NumPy's), or None: the core then copies with the source's or an intermediary's own copy."""
    return registry.role_holder(HostCopier)


class Hub:
    """The registry, the plan cache, the fast-path routes and the read-only ranges, together."""

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        compiled: bool | None = None,
        structure_error: Callable[[Any], UnsupportedTensorError | None] | None = None,
    ) -> None:
        """`compiled`: use the compiled fast path (default: when it is built and not off).
        `structure_error`: the error for a structure holding tensors (a dict, a list, a pytree
        node) given to `convert`, or None; `interop.api` gives the default hub convert_tree's."""
        self.registry = registry or Registry()
        self.structure_error = structure_error or no_structure_hint
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.read_only = readonly.Ranges()
        self.routes = Routes(self, compiled)
        self._targets: dict[Any, Adapter] = {}
        #: (the host copier,) once looked up: every CPU plan asks for it
        self._copier: tuple[Any] | None = None
        #: set to a list to record every executed step (the property tests compare them)
        self.trace: list[Step] | None = None

    # --- arguments -------------------------------------------------------------------------
    def target(self, to: Any) -> Adapter:
        try:
            found = self._targets.get(to)
        except TypeError:
            found = None
        if found is not None:
            return found
        if isinstance(to, str):
            adapter = self.registry.get(to)
        elif isinstance(to, Adapter):
            return to
        elif isinstance(to, types.ModuleType):
            adapter = self.registry.for_module(to)
        else:
            raise InvalidArgumentError(
                f"`to` must be a framework name, module or Adapter, not {describe(to)}"
            )
        self._targets[to] = adapter
        return adapter

    def device(self, device: Any) -> Device | None:
        """A `device=` argument as a Device (see `parse_device`), frameworks' objects too."""
        try:
            found = _core_device(device)
        except DeviceError:
            found = None
        if found is not None or device is None or isinstance(device, Device):
            return found or device
        return parse_device(device, self.registry.loaded())  # adapters: loaded only here

    def arguments(self, to: Any, copy: Any, device: Any, stream: Any, dtypes: Any) -> None:
        """Check a call's arguments other than the tensor, raising what `convert` raises for
        malformed ones (`explain` raises these, and explains refusals of the tensor)."""
        copy_flag(copy)
        self.target(to)
        self.device(device)
        streams.as_int(stream)
        cast_table(dtypes)

    def source_name(self, x: Any) -> str:
        """The source's name as plans give it: its framework's, else its type's."""
        adapter = self.registry.detect(x)
        if adapter is not None:
            return adapter.name
        return CAPSULE_SOURCE if cap.is_capsule(x) else describe(x)

    def source(self, x: Any) -> tuple[Adapter | None, str, Capabilities | None, Any]:
        """(adapter, source name, its capabilities, the object to export from): sources
        without DLPack (buffers, array interfaces, Arrow) become producers here."""
        adapter = self.registry.detect(x)
        if adapter is not None:
            return adapter, adapter.name, adapter.capabilities(), x
        if cap.is_capsule(x):
            return None, CAPSULE_SOURCE, None, x
        stand_in = self.registry.stand_in(x)  # a NumPy scalar: NumPy's 0-d array
        if stand_in is not None:
            return self.source(stand_in)
        producer = sources.as_producer(x)  # None for anything it does not recognise
        if producer is not None:
            return None, producer.name, None, producer
        if hasattr(x, "__dlpack__"):
            return None, describe(x), None, x
        raise self.structure_error(x) or UnsupportedTensorError(
            f"cannot convert a {describe(x)}: "
            + (
                sources.remedy(x)
                or "no installed adapter owns it and it has no __dlpack__ (installed adapters: "
                f"{', '.join(a.name for a in self.registry.loaded()) or 'none'}); make it an "
                "array first, such as numpy.asarray(x), or install its framework's adapter"
            )
        )

    # --- taking a capsule ------------------------------------------------------------------
    def take(self, source: Any, name: str, step: Export) -> Exchange:
        """The producer's capsule, held and described; its own failures become typed errors."""
        try:
            try:
                return Exchange.from_source(
                    source, versioned=step.versioned, stream=step.stream, framework=name
                )
            except BufferError:
                if step.versioned or cap.is_capsule(source):
                    raise
                # NumPy refuses legacy capsules of read-only arrays: ask for a versioned one.
                return Exchange.from_source(
                    source, versioned=True, stream=step.stream, framework=name
                )
        except InteropError:
            raise
        except Exception as exc:  # the producer's own refusal, as a typed error naming it
            # (and of its builtin class: frameworks' own imports let a BufferError through)
            raise builtin_kind(exc, UnsupportedTensorError)(
                f"{name} could not export this tensor through DLPack: {type(exc).__name__}: {exc}"
            ) from exc

    def export_step(
        self,
        x: Any,
        adapter: Adapter | None,
        name: str,
        target: Adapter,
        tcaps: Capabilities,
        scaps: Capabilities | None,
        stream: Any,
    ) -> Export:
        def device_type() -> str | None:
            if cap.is_capsule(x):
                return None
            if adapter is None and hasattr(x, "__dlpack_device__"):
                # a producer no adapter vouches for: its answer is checked, whatever the target
                kind = producer_device(x).type
                return None if tcaps.cpu_only else kind
            if tcaps.cpu_only:
                return None  # no stream to order (a GPU source fails or moves at the source)
            if scaps is not None and (scaps.cpu_only or adapter.on_cpu(x)):  # type: ignore[union-attr]
                return None
            producer = adapter_export(adapter, x) if adapter else x
            if cap.is_capsule(producer) or not hasattr(producer, "__dlpack_device__"):
                return None
            return producer_device(producer).type

        return export_step(
            name,
            tcaps,
            device_type,
            streams.as_int(stream),
            lambda kind: streams.as_int(target.consumer_stream(Device(kind, 0))),
            scaps,
        )

    # --- facts and plans -------------------------------------------------------------------
    def facts(
        self,
        x: Any,
        adapter: Adapter | None,
        scaps: Capabilities | None,
        info: TensorInfo,
        tcaps: Capabilities | None = None,
    ) -> Facts:
        read_only, why = info.read_only, ""
        taken = bool(tcaps and tcaps.one_import_per_address) and cap.address_claimed(info.data)
        if not read_only and scaps is not None and scaps.immutable and self.read_only:
            start, nbytes = info.span()
            if self.read_only.covers(start, nbytes):
                read_only = True
                why = f"the {info.framework} tensor aliases read-only memory the core shared"
        return Facts(
            info.dtype,
            info.device,
            info.layout,
            read_only,
            why,
            bool(info.byte_offset),
            info.alignment,
            info.size == 0,
            info.version is not None,
            info.deleter,
            info.manager_ctx,
            adapter.export_hazard(x) if adapter else "",
            adapter.alias_hazard(x) if adapter else "",
            taken,
        )

    def plan(
        self,
        name: str,
        scaps: Capabilities | None,
        facts: Facts,
        target: Adapter,
        tcaps: Capabilities,
        export: Export,
        copy: bool | None,
        device: Device | None,
        cast: str | None = None,
        source: Adapter | None = None,
    ) -> Plan:
        """The plan (cached by everything it depends on), with its route choice."""
        policy = readonly.current_policy()
        numpy_copies = self.numpy_copies(facts, target, scaps, tcaps)
        intermediary = (
            None if scaps is not None or numpy_copies else self.intermediary(facts, target)
        )
        key = (
            name,
            scaps,
            target.name,
            tcaps,
            facts,
            export,
            copy,
            device,
            policy,
            numpy_copies,
            intermediary,
            cast,
        )
        plan = self.plans.get(key)
        if plan is None and cast is not None:
            plan = negotiate_cast(
                name, scaps, facts, target, tcaps, export, cast, copy=copy, device=device
            )
            plan = with_fields(plan, route=RouteChoice("a cast copies"))
            self.plans[key] = plan
        if plan is None:
            plan = negotiate(
                name,
                scaps,
                facts,
                target,
                tcaps,
                export,
                copy=copy,
                device=device,
                policy=policy,
                numpy_copies=numpy_copies,
                intermediary=intermediary,
                aligned_source=isinstance(source, AlignedAllocator),
            )
            route = choose_route(
                plan,
                facts,
                source,
                target,
                scaps,
                tcaps,
                device,
                export,
                copy,
                self.host_copier() if numpy_copies else None,
            )
            plan = with_fields(plan, route=route)
            self.plans[key] = plan
        return plan

    def numpy_copies(
        self, facts: Facts, target: Adapter, scaps: Capabilities | None, tcaps: Capabilities
    ) -> bool:
        """Whether the host copier (the adapter declaring `HostCopier`: NumPy's) is imported and
        can copy this tensor's memory: the program's state, an input of the plan
        (`negotiate(numpy_copies=)`). It is imported for the copy where the source's own
        copies are less aligned than the target shares (MLX's into TensorFlow)."""
        return (
            facts.device.type == "cpu"
            and dl.DTYPE_CODES.get(facts.dtype, (0, 0))[1] % 8 == 0
            and (copier := self.host_copier()) is not None
            # the host copier as the target is imported for the result anyway: it may copy first
            and (
                copier.imported()
                or target is copier
                or (scaps is not None and scaps.copy_alignment < tcaps.alignment_on("cpu")[0])
            )
        )

    def intermediary(self, facts: Facts, target: Adapter) -> str | None:
        """An imported framework that can import this capsule as it is and copy it."""
        for adapter in self.registry.loaded():
            caps = adapter.capabilities()
            if (
                adapter is not target
                and adapter.imported()  # never import a framework the program did not
                and facts.dtype in caps.import_dtypes
                and facts.dtype in caps.export_dtypes
                and facts.device.type in caps.devices
                and not adapter.device_unavailable(facts.device)
                and caps.accepts_layout(facts.layout)
                and not (facts.byte_offset and not caps.import_byte_offset)
            ):
                return adapter.name
        return None

    # --- the public calls ------------------------------------------------------------------
    def prepare(
        self,
        x: Any,
        to: Any,
        copy: Any,
        device: Any,
        stream: Any,
        capsule: Any = None,
        dtypes: Any = None,
    ) -> tuple[Conversion, Plan]:
        """Everything up to the plan: the exported capsule is held in the conversion."""
        copy = copy_flag(copy)
        target = self.target(to)
        dev = self.device(device)
        casts = cast_table(dtypes)
        adapter, name, scaps, x = self.source(x)
        if adapter is target and not (casts and self.casts(x, casts)):
            conv = Conversion(self, x, adapter, name, target, target.capabilities())
            info = None
            if dev is not None:
                info = self.inspect(x)
            elif copy:  # only to describe it: a copy needs no DLPack (object arrays...)
                try:
                    info = self.inspect(x)
                except InteropError:
                    pass
            return conv, same_framework_plan(target, info, copy, dev)
        tcaps = target.capabilities()
        conv = Conversion(self, x, adapter, name, target, tcaps)
        export = self.export_step(x, adapter, name, target, tcaps, scaps, stream)
        if capsule is not None and export.stream is None:
            # the fast path exported it already, for the same step
            conv.exchange = Exchange(capsule, read_capsule(capsule, name, export.versioned))
        else:
            if capsule is not None:  # a GPU tensor's, taken without the consumer's stream
                cap.release_unconsumed(capsule)  # (then taken again, in order)
            conv.exchange = conv.export(x, export)
        conv.exported = conv.exchange.info
        conv.key = self.routes.fast.capsule_key(conv.exchange.capsule)
        try:
            facts = self.facts(x, adapter, scaps, conv.exchange.info, tcaps)
            cast = casts.get(facts.dtype) if casts else None
            cast = None if cast == facts.dtype else cast
            plan = self.plan(name, scaps, facts, target, tcaps, export, copy, dev, cast, adapter)
            ndim_refusal(name, facts.dtype, len(conv.exchange.info.shape), target, tcaps)
        except BaseException:
            conv.exchange.release()
            raise
        return conv, plan

    def casts(self, x: Any, casts: dict[str, str]) -> bool:
        """Whether `dtypes=` casts tensor `x` (then even its own framework takes it through
        DLPack, cast on the way)."""
        try:
            dtype = self.inspect(x).dtype
        except InteropError:
            return False
        return casts.get(dtype, dtype) != dtype

    def convert(
        self,
        x: Any,
        to: Any,
        copy: Any = None,
        device: Any = None,
        stream: Any = None,
        capsule: Any = None,
        dtypes: Any = None,
    ) -> Any:
        cap.drain_deferred()  # releases Paddle's lock made wait: none piles up
        conv, plan = self.prepare(x, to, copy, device, stream, capsule, dtypes)
        trace = self.trace
        try:
            for step in plan.steps:
                try:
                    step.run(conv)
                except cap.AddressClaimed:
                    if cap.is_capsule(x):
                        raise
                    # another thread's import claimed the address since the plan was made:
                    # plan again (that import, if still held, now makes this one a copy)
                    if conv.exchange is not None:
                        conv.exchange.release()
                        conv.exchange = None
                    return self.convert(x, to, copy, device, stream, dtypes=dtypes)
                except (InteropError, MemoryError):
                    raise
                except Exception as exc:  # a framework failing where the plan said it works
                    raise builtin_kind(exc, UnsupportedTensorError)(
                        f"{step.where} failed to {step.action} the tensor ({step}): "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                if trace is not None:
                    trace.append(step)
        finally:
            if conv.exchange is not None:
                conv.exchange.release()
        # what the conversion teaches is of the tensor it moved: a stand-in's (a NumPy scalar's
        # 0-d array), which `source` put in its place; a producer teaches nothing of its own
        self.after(x if conv.adapter is None else conv.x, conv, plan, to, copy, device, stream)
        return conv.result

    def after(
        self, x: Any, conv: Conversion, plan: Plan, to: Any, copy: Any, device: Any, stream: Any
    ) -> None:
        """What a finished conversion teaches: read-only ranges shared into frameworks whose
        exports lose the flag, and fast-path routes where the plan chose one."""
        if plan.identity:
            if plan.route.remembered and conv.adapter is not None:
                self.routes.learn_same(x, to, conv.adapter)
            return
        info = conv.exported
        if info is None:
            return
        if plan.zero_copy and info.read_only and conv.tcaps.immutable:
            # tied to the source (every alias keeps it alive), else to the result
            self.read_only.add(*info.span(), x, conv.result)
        # the plan decided whether a route may replay it (never with device=, or without a
        # source adapter); routes serve calls without stream= only, so only those teach one
        if plan.route.remembered and stream is None:
            assert conv.adapter is not None  # (a remembered route has a source adapter)
            export = next((s for s in plan.steps if isinstance(s, Export)), None)
            import_ = next(s for s in plan.steps if isinstance(s, Import))
            bridge = next((s for s in plan.steps if isinstance(s, Bridge)), None)
            rewrap = next((s for s in plan.steps if isinstance(s, Rewrap)), None)
            if plan.route.copier is not None:
                # (a copy's bridge and re-wrap are the copy's: its own route takes them)
                bridge = rewrap = None
            self.routes.learn(
                x,
                to,
                conv.adapter,
                conv.target,
                conv.tcaps,
                info,
                plan.route,
                import_,
                conv.key,
                bridge,
                rewrap,
                export,
            )

    def explain(
        self,
        x: Any,
        to: Any,
        copy: Any = None,
        device: Any = None,
        stream: Any = None,
        dtypes: Any = None,
    ) -> Plan:
        conv, plan = self.prepare(x, to, copy, device, stream, dtypes=dtypes)
        if conv.exchange is None:  # the same framework
            try:
                info: TensorInfo | None = self.inspect(x)
            except InteropError:
                info = None
            return plan.for_tensor(info)
        info = conv.exchange.info
        conv.exchange.release()
        notes = conv.adapter.export_notes(x) if conv.adapter else ()
        return plan.for_tensor(info, notes)

    def inspect(self, x: Any) -> TensorInfo:
        adapter, name, scaps, x = self.source(x)
        if cap.is_capsule(x):
            return read_capsule(x, CAPSULE_SOURCE)
        exchange = self.take(adapter_export(adapter, x) if adapter else x, name, Export(name))
        exchange.release()
        info = exchange.info
        if scaps is not None and scaps.immutable and not info.read_only:
            info = info._replace(read_only=True)
        return info

    def register(self, adapter: Adapter, *, replace: bool = False) -> None:
        self.registry.register(adapter, replace=replace)
        self.plans.clear()
        self._targets.clear()
        self._copier = None
        self.routes.clear()

    def host_copier(self) -> Any:
        """The registry's host copier (`host_copier`), looked up once until `register`."""
        if self._copier is None:
            self._copier = (host_copier(self.registry),)
        return self._copier[0]

    def capsule_boxes(self) -> Any:
        """The host copier's boxes for the pure release runtime (`Releases.take_boxes_from`), once
        its framework is imported (never imported here): None until then, False where it
        makes none (no adapter, no hook, or a version that cannot)."""
        try:
            holder = self.registry.role_holder(CapsuleBoxes)
            if holder is not None and not holder.imported():
                return None
            return (holder.capsule_boxes(cap.RELEASES) if holder is not None else None) or False
        except Exception:  # a broken adapter boxes nothing: the core's own boxes serve
            return False


def deliver_unplanned(exchange: Exchange, target: Adapter) -> Any:
    """Hand `exchange`'s capsule straight to `target`'s importer with no plan, only bridged to
    a kind it reads. For tests that probe what a framework itself does with a capsule."""
    tcaps = target.capabilities()
    info = exchange.info
    capsule = Capsule(info.version is not None, info.read_only, True, True, info.device.type)
    steps = delivery(capsule, tcaps, target.name)
    conv = Conversion(None, None, None, "", target, tcaps)  # type: ignore[arg-type]
    conv.exchange = exchange
    for step in steps:
        step.run(conv)
    return conv.result


class Calls(NamedTuple):
    """The calls made through one hub, as the modules above the engine take them (tree, grad,
    sharding): what `interop.convert` and `interop.explain` are for the default hub.
    `interop.api.calls(hub)` builds them (once, for the default hub)."""

    hub: Hub
    #: convert(x, to, *, copy, device, stream, dtypes): the fast path's front, then the full path
    convert: Callable[..., Any]
    #: explain(x, to, *, copy, device, stream, dtypes) -> Plan, refusals explained
    explain: Callable[..., Any]
    #: per type met: whether it is a sharded array, as this hub's adapters say (`sharding.kinds`)
    kinds: TypeTable
