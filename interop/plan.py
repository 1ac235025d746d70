"""Negotiation: the one place that decides how a conversion happens, as an executable plan.

`negotiate` reads both sides' declared capabilities and the facts of one tensor and returns a
`Plan`: a tuple of typed steps (export, copy, move, re-wrap, bridge, import, notes). `convert`
runs exactly those steps and `explain` prints exactly those steps, so the two cannot disagree.
Plans depend only on hashable values (capabilities and facts, never the tensor itself), so they
are cached; what is said about one particular tensor (shape, strides, address) is added when
`explain` runs and never cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from . import streams
from .adapter import (
    C_EXCHANGE_API,
    CAPSULE,
    CAPSULE_VERSIONED,
    DLPACK,
    IMMUTABLE,
    OBJECT,
    OBJECT_LEGACY,
    WRITABLE,
    Capabilities,
)
from .dlpack import STREAM_DEVICES
from .errors import (
    CopyForbiddenError,
    DeviceError,
    FrameworkNotInstalledError,
    InteropError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
    typed,
)
from .info import CANONICAL, CPU, Device, TensorInfo
from .readonly import COPY, SHARE
from .step import Step

if TYPE_CHECKING:
    from .adapter import Adapter

# Where a copy is made (Plan.copy_at), for people and tests.
AT_SOURCE = "source"  # the source side copies (its framework, or NumPy over its memory)
AT_IMPORT = "import"  # the target's importer copies by itself (JAX and unaligned buffers)
AT_INTERMEDIARY = "intermediary"  # a capsule no side can copy is copied by another framework
MOVE_AT_SOURCE = "device-source"  # the source framework copies to the asked device
MOVE_AT_TARGET = "device-target"  # the target imports where the data is, then copies it
MOVE_ON_IMPORT = "device-import"  # the target copies from the source's device as it imports

#: what `interop.aligned_numpy()` makes the allocator of the `AlignedAllocator` role's holder
#: (NumPy's) align new tensors to, and how
ALIGNED_BYTES = 64
ALIGNED_REMEDY = (
    "; NumPy makes 64-byte aligned arrays, which are shared, inside `with "
    "interop.aligned_numpy():` or after interop.set_aligned_numpy(True) (compiled accelerator)"
)

#: What a remembered route's key stands for, in both twins: tensors equal in every fact (Facts
#: field) but these two, which a route checks on each call instead (memory the core remembers
#: as read-only sends calls to the full path; a claimed address makes the re-wrap miss). The
#: compiled twin's key packs the capsule's facts; the pure twin's is the source adapter's
#: `fingerprint`, with whether the address is as aligned as the target shares.
KEYS_OMIT = frozenset({"read_only_why", "address_taken"})


class Facts(NamedTuple):
    """Everything a plan depends on about one tensor; equal facts give equal plans."""

    dtype: str
    device: Device
    layout: str
    read_only: bool  # the DLPack flag, or memory the core knows it shared read-only
    read_only_why: str  # "" or why it is read-only without the flag (provenance)
    byte_offset: bool
    alignment: int  # the largest power of two dividing the data address, at most 64
    empty: bool
    versioned: bool  # the capsule's kind
    deleter: bool  # the capsule's deleter is set
    manager_ctx: bool  # the capsule's manager_ctx is set
    export_hazard: str  # why the tensor cannot be exported as it is ("" if none)
    alias_hazard: str  # why a writable alias of it would be unsafe ("" if none)
    #: a live import into the target claims the data address, and the target files each
    #: import's release under it (Paddle): a second import would drop the first's release
    address_taken: bool = False


# --- steps -------------------------------------------------------------------------------------
class Conversion(Protocol):
    """What steps run on: a conversion in progress (`interop.engine.Conversion`)."""

    x: Any
    exchange: Any

    def export(self, x: Any, step: Export) -> Any: ...
    def copy_at_source(self, step: CopyAtSource) -> None: ...
    def move_at_source(self, step: MoveAtSource) -> None: ...
    def rewrap(self, step: Rewrap) -> None: ...
    def bridge(self, step: Bridge) -> None: ...
    def import_(self, step: Import) -> None: ...
    def import_onto(self, step: ImportOnto) -> None: ...
    def move_at_target(self, step: MoveAtTarget) -> None: ...
    def same_framework(self, step: SameFramework) -> None: ...
    def cast(self, step: Cast) -> None: ...


@dataclass(frozen=True)
class Note(Step):
    action: ClassVar[str] = "note"


@dataclass(frozen=True)
class WarmRoute(Note):
    """What a remembered route does with this call (explain only: the plan is not changed):
    `why` in a user's words, `detail` naming the functions it calls (`Plan.details()`)."""

    detail: str = ""


@dataclass(frozen=True)
class Export(Step):
    """Take a DLPack capsule from the producer (before negotiation, to read its facts);
    `exchange_api`: a route may take the versioned capsule through the source type's C
    exchange API (`__dlpack_c_exchange_api__`, DLPack 1.3) instead (the same capsule, without
    the Python call; the full path exports through the adapter)."""

    versioned: bool = True
    stream: int | None = None
    exchange_api: bool = False
    action: ClassVar[str] = "export"

    def run(self, conv: Conversion) -> None:
        if conv.exchange is None:
            conv.exchange = conv.export(conv.x, self)


@dataclass(frozen=True)
class CopyAtSource(Step):
    """Copy the tensor compactly (64-byte aligned) on the source side, then share the copy:
    through a NumPy view of the DLPack memory when that is faster than the framework's own."""

    export: Export = field(default_factory=lambda: Export(""))
    numpy: bool = False
    #: the copy holds for every tensor a route's key stands for (whatever KEYS_OMIT's facts
    #: and the immutable policy are): a route may replay it
    keyed: bool = False
    action: ClassVar[str] = "copy"

    def run(self, conv: Conversion) -> None:
        conv.copy_at_source(self)


@dataclass(frozen=True)
class MoveAtSource(Step):
    device: Device = CPU
    export: Export = field(default_factory=lambda: Export(""))
    action: ClassVar[str] = "copy"

    def run(self, conv: Conversion) -> None:
        conv.move_at_source(self)


@dataclass(frozen=True)
class Rewrap(Step):
    """Give the consumer a capsule whose deleter and manager_ctx are set (same memory);
    `defer`: the producer is released just after the consumer frees it, on another thread;
    `claim`: the data address is claimed until then (Capabilities.one_import_per_address)."""

    defer: bool = False
    claim: bool = False
    action: ClassVar[str] = "re-wrap"

    def run(self, conv: Conversion) -> None:
        conv.rewrap(self)


@dataclass(frozen=True)
class Bridge(Step):
    """Re-wrap the capsule in the other kind (legacy <-> versioned), READ_ONLY kept: set on a
    versioned capsule where `read_only` (or the capsule's own flag) says; a read-only tensor
    goes into a legacy capsule, which cannot say it, only where `legacy_read_only_ok` (the
    target never writes what it imports, or marks legacy imports read-only)."""

    versioned: bool = True
    read_only: bool = False
    legacy_read_only_ok: bool = False
    action: ClassVar[str] = "bridge"

    def run(self, conv: Conversion) -> None:
        conv.bridge(self)


@dataclass(frozen=True)
class Import(Step):
    """The target takes the capsule (`as_object`: through an object with `__dlpack__`);
    `writable`: its adapter then makes the result writable (`make_writable`);
    `exchange_api`: a route may import through the target type's C exchange API instead of
    the adapter's importer (the same result; it takes versioned capsules only, so a route
    boxes a legacy one as versioned first: `interop.routes.exchange_route`). `alignment`,
    `min_ndim`, `max_ndim` (None: no most): the addresses it shares and the dimensions its
    tensors have, which a remembered route checks on each call (keys say whether an address
    is that aligned; they do not carry the number of dimensions)."""

    as_object: bool = False
    copies: bool = False  # the importer copies by itself
    writable: bool = False
    exchange_api: bool = False
    alignment: int = 1
    min_ndim: int = 0
    max_ndim: int | None = None
    action: ClassVar[str] = "import"

    def run(self, conv: Conversion) -> None:
        conv.import_(self)


@dataclass(frozen=True)
class ImportOnto(Step):
    device: Device = CPU
    action: ClassVar[str] = "import"

    def run(self, conv: Conversion) -> None:
        conv.import_onto(self)


@dataclass(frozen=True)
class MoveAtTarget(Step):
    device: Device = CPU
    action: ClassVar[str] = "copy"

    def run(self, conv: Conversion) -> None:
        conv.move_at_target(self)


@dataclass(frozen=True)
class SameFramework(Step):
    """The tensor already is the target framework's: itself, a copy, or a move."""

    copy: bool = False
    device: Device | None = None
    action: ClassVar[str] = "return"

    def run(self, conv: Conversion) -> None:
        conv.same_framework(self)

    def __str__(self) -> str:
        if self.device is not None:
            return f"copy ({self.where}): move to {self.device} with its own copy"
        if self.copy:
            return f"copy ({self.where}): {self.why}"
        return f"return ({self.where}): the tensor as it is"


# --- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteChoice:
    """Whether later calls like this one may take a remembered route (the fast path), decided
    with the plan: a route replays this plan's export, bridge and import through `exporter`
    and `importer` and decides nothing itself. `why_not` is "" where it may."""

    why_not: str = "not decided"
    exporter: Callable[[Any], Any] | None = None
    importer: Callable[[Any], Any] | None = None
    #: a copying plan's route: the source's own copy (`Adapter.copy`), whose result then
    #: converts as any fresh tensor does (its own route); the exporter only keys the tensor
    copier: Callable[[Any], Any] | None = None
    #: the immutable policy decides (a source whose buffers are immutable, a target whose
    #: results are writable): the route gives a call back to the full path unless it shares
    guarded: bool = False

    @property
    def remembered(self) -> bool:
        return not self.why_not

    @property
    def returns_itself(self) -> bool:
        """A remembered route that returns the tensor as it is (its own framework's)."""
        return not self.why_not and self.exporter is None and self.copier is None

    @property
    def words(self) -> str:
        """The choice in a user's words, without the functions' names (`str()` names them)."""
        if self.why_not:
            return str(self)
        if self.returns_itself:
            return SAME_ROUTE
        if self.copier is not None:
            return (
                "convert remembers this plan as a route: the source is copied, and the copy "
                "converts through its own route, for later tensors like this one"
            )
        return "convert remembers this plan as a route, taken by later tensors like this one"

    @property
    def names(self) -> str:
        """The functions a remembered route calls, by name ("" where none is remembered)."""
        if self.why_not or self.returns_itself:
            return ""
        if self.copier is not None:
            return f"{dotted_name(self.copier)} copies"
        return f"{dotted_name(self.exporter)} -> {dotted_name(self.importer)}"

    def __str__(self) -> str:
        if self.why_not:
            return f"convert plans every call like this one: {self.why_not}"
        if self.returns_itself:
            return SAME_ROUTE
        if self.copier is not None:
            return (
                f"convert remembers this plan as a route: {self.names}, and the copy converts "
                "through its own route, for later tensors like this one"
            )
        return (
            f"convert remembers this plan as a route: {self.names}, taken by later tensors "
            "like this one"
        )


#: what a tensor converted to its own framework teaches (`copy=None` or False, no `device=`)
SAME_ROUTE = "convert remembers that later tensors like this one are returned as they are"


def dotted_name(function: Any) -> str:
    """A function's or type's dotted name, for a reader (a partial's function, a wrapper's
    own)."""
    function = getattr(function, "func", function)
    module = getattr(function, "__module__", None) or ""
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}.{name}" if module else name


@dataclass(frozen=True)
class Plan:
    """How a conversion happens; `str(plan)` says why, for a person, and `details()` also
    names the functions a remembered route calls. A refused conversion's plan has no steps:
    `error` is the exception `convert` raises for it, its message the why and the remedy."""

    source: str
    target: str
    dtype: str
    device: Device | None
    layout: str
    zero_copy: bool
    steps: tuple[Step, ...]
    reasons: tuple[str, ...] = ()
    copy_at: str | None = None
    #: a plain share: export, (re-wrap), import, with nothing decided per call — routes
    #: for the fast path are learned from these, and from copies `choose_route` approves
    plain: bool = False
    #: the tensor this plan was explained for (set by `explain`, never cached)
    tensor: TensorInfo | None = None
    #: whether later calls like this one take a remembered route, and through what
    route: RouteChoice = field(default_factory=RouteChoice)
    #: what `convert` raises for this conversion (`explain` returns it instead of raising)
    error: InteropError | None = field(default=None, compare=False)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(s.why for s in self.steps if isinstance(s, Note))

    @property
    def identity(self) -> bool:
        return any(isinstance(s, SameFramework) for s in self.steps)

    @property
    def target_device(self) -> Device | None:
        for step in self.steps:
            if isinstance(step, (MoveAtSource, MoveAtTarget, ImportOnto)):
                return step.device
            if isinstance(step, SameFramework):
                return step.device
        return None

    def for_tensor(
        self,
        info: TensorInfo | None,
        notes: tuple[str, ...] = (),
        route: WarmRoute | None = None,
    ) -> Plan:
        """This plan as explained for one tensor: its description, the source's notes and what
        a remembered route does with the call."""
        warm = () if route is None else (route,)
        steps = (*warm, *(Note(self.source, n) for n in notes), *self.steps)
        return replace(self, tensor=info, steps=steps)

    @property
    def decided_notes(self) -> tuple[str, ...]:
        """The notes of the decision itself, without what a remembered route does."""
        return tuple(
            s.why for s in self.steps if isinstance(s, Note) and not isinstance(s, WarmRoute)
        )

    def __str__(self) -> str:
        return self._text(detailed=False)

    def details(self) -> str:
        """`str(plan)`, with the functions a remembered route calls named (the adapters'
        hooks, the frameworks' entry points): for debugging the warm path."""
        return self._text(detailed=True)

    def _text(self, detailed: bool) -> str:
        if self.error is not None:
            return (
                f"{self.source} -> {self.target}: refused ({type(self.error).__name__})\n"
                f"  why: {self.error}"
            )
        head = f"{self.source} -> {self.target}, {self.dtype} on {self.device}, {self.layout}: "
        if self.identity:
            head += "same framework, " + ("returned as is" if self.zero_copy else "fresh copy")
        elif self.zero_copy:
            head += "zero-copy (memory shared)"
        else:
            head += "copy (" + "; ".join(self.reasons) + ")"
        lines = [head]
        if self.tensor is not None:
            lines.append(f"  tensor: {self.tensor}")
        lines += [
            f"  {i}. {step}"
            + (f" ({step.detail})" if detailed and isinstance(step, WarmRoute) else "")
            for i, step in enumerate(self.steps, 1)
        ]
        return "\n".join(lines)


def refused_plan(source: str, target: str, error: InteropError) -> Plan:
    """The plan `explain` returns for a conversion `convert` refuses with `error` (whose
    message names the dtype, device or layout at fault: nothing else is read)."""
    return Plan(
        source,
        target,
        "?",
        None,
        "?",
        zero_copy=False,
        steps=(),
        reasons=(str(error),),
        route=RouteChoice("the conversion is refused"),
        error=error,
    )


# --- negotiation -------------------------------------------------------------------------------
def export_step(
    source: str,
    tcaps: Capabilities,
    device_type: Callable[[], str | None],
    stream: int | None,
    consumer_stream: Callable[[str], int | None],
    scaps: Capabilities | None = None,
) -> Export:
    """How to take the capsule: the kind the target can read READ_ONLY from, and the stream
    to hand a producer on a stream device (`device_type()` is asked only when it matters);
    through the source's C exchange API on a route where `scaps` declares it, for a
    versioned capsule handed over with no stream."""
    kind = device_type()
    chosen = None
    if kind in STREAM_DEVICES:
        chosen = streams.normalize(kind, stream if stream is not None else consumer_stream(kind))
    why = "take a DLPack capsule" + ("" if chosen is None else f" ordered on stream {chosen}")
    versioned = tcaps.wants_versioned
    api = versioned and chosen is None and scaps is not None and C_EXCHANGE_API in scaps.exports
    return Export(source, why, versioned=versioned, stream=chosen, exchange_api=api)


def ndim_refusal(source: str, dtype: str, ndim: int, target: Adapter, tcaps: Capabilities) -> None:
    """Refuse a tensor of `ndim` dimensions the target cannot hold now (`Adapter.ndim_refusal`:
    Capabilities.min_ndim, max_ndim, or a mode of the framework). Checked beside the plan, not
    in it: plans (and the fast path's keys) do not depend on the number of dimensions; routes
    check the declared bounds before they export, and leave the rest to this check."""
    too = target.ndim_refusal(ndim)
    name = target.name
    if too:
        fix = "x.reshape(1) for a 0-d one" if ndim < tcaps.min_ndim else "to fewer dimensions"
        raise typed(UnsupportedLayoutError, *tcaps.import_errors)(
            f"{name} cannot import a {ndim}-dimensional {dtype} tensor from {source}: {too}; "
            f"reshape it ({fix}) first"
        )


def _forbid(source: str, target: str, reasons: list[str]) -> CopyForbiddenError:
    return CopyForbiddenError(
        f"copy=False, but {source} -> {target} cannot share memory: "
        + "; ".join(reasons)
        + ". Drop copy=False (copy=None copies only when it must), or make the copy yourself "
        "with the source framework's own call (such as x.copy() or x.contiguous()) and "
        "convert that"
    )


#: what each layout class is, in words a user recognises (interop.info's classes)
_LAYOUT_WORDS = {
    "negative": "a reversed view: some strides are negative",
    "permuted": "a transposed view",
    "strided": "a sliced view with gaps",
    "broadcast": "a broadcast view: some strides are 0",
}


class Capsule(NamedTuple):
    """The capsule the importer gets after the copy (if any): what `delivery` decides on."""

    versioned: bool
    read_only: bool
    deleter: bool
    manager_ctx: bool
    device_type: str = "cpu"  # where it lives


def delivery(capsule: Capsule, tcaps: Capabilities, name: str) -> tuple[Step, ...]:
    """Bridge or re-wrap the final capsule so the target's importer can take it, then import."""
    read_only, deleter, manager_ctx = capsule.read_only, capsule.deleter, capsule.manager_ctx
    imports = tcaps.imports
    steps: list[Step] = []
    writable = False
    if capsule.versioned:
        if CAPSULE_VERSIONED in imports:
            as_object = False
        elif OBJECT in imports:
            as_object = True
        else:
            ok = tcaps.import_access != WRITABLE or tcaps.legacy_import_read_only
            why = "the importer takes legacy capsules"
            steps.append(Bridge("core", why, versioned=False, legacy_read_only_ok=ok))
            as_object = CAPSULE not in imports
    elif CAPSULE in imports:
        as_object = False
    elif OBJECT in imports:
        as_object = True
        if read_only != tcaps.legacy_import_read_only:
            if not read_only and tcaps.writable_legacy_import:
                writable = True  # made writable on arrival: no bridge
            else:
                why = "so that READ_ONLY is said" if read_only else "so that the result is writable"
                steps.append(Bridge("core", f"into a versioned capsule {why}", read_only=read_only))
    elif OBJECT_LEGACY in imports:
        as_object = True
    else:
        steps.append(Bridge("core", "the importer takes versioned capsules", read_only=read_only))
        as_object = False
    bridged = bool(steps)
    if tcaps.frees_under_lock:
        why = (
            f"{name} frees imports under a lock of its own, which the release of memory it "
            f"exported (or one needing the GIL) would wait for: the release runs just after, "
            f"on a thread of the core's"
        )
        if tcaps.one_import_per_address:
            why += "; the data address stays claimed until then"
        steps.append(Rewrap("core", why, defer=True, claim=tcaps.one_import_per_address))
    elif not bridged and (
        (tcaps.import_needs_deleter and not deleter)
        or (tcaps.import_needs_manager_ctx and not manager_ctx)
    ):
        what = "deleter" if tcaps.import_needs_deleter and not deleter else "manager_ctx"
        steps.append(Rewrap("core", f"the capsule's {what} is NULL, which {name} cannot take"))
    why = "share the buffer through DLPack"
    if writable:
        why += (
            f", then make the result writable ({name} marks what it takes from a legacy "
            f"capsule read-only; this memory may be written)"
        )
    # the exchange API takes a capsule (never an object), versioned: never after a bridge
    # into a legacy one, which the plan makes for an importer taking legacy ones only; a
    # result made writable is the adapter importer's
    api = C_EXCHANGE_API in tcaps.exports and not as_object and not writable
    api = api and not any(isinstance(s, Bridge) and not s.versioned for s in steps)
    import_ = Import(
        name,
        why,
        as_object=as_object,
        writable=writable,
        exchange_api=api,
        alignment=max(tcaps.alignment_on(capsule.device_type)[0], 1),
        min_ndim=tcaps.min_ndim,
        max_ndim=tcaps.max_ndim,
    )
    return (*steps, import_)


def negotiate(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    target: Adapter,
    tcaps: Capabilities,
    export: Export,
    *,
    copy: bool | None,
    device: Device | None,
    policy: str = SHARE,
    numpy_copies: bool = False,
    intermediary: str | None = None,
    aligned_source: bool = False,
) -> Plan:
    """Plan a conversion of a tensor with `facts`, exported by `export`, into `target`, as
    nanobind imports an ndarray: the refusals, then what stops sharing, then where the copy is
    made, then the steps. The program's state that feeds it (`numpy_copies`, `intermediary`,
    `policy`) is read by the caller and passed in; the target's own answers (`refusals`) are
    declared to depend on the facts and its capabilities only: equal inputs, equal plans.

    `numpy_copies`: NumPy is imported and can copy this tensor's memory (the core's copier);
    `intermediary`: for sources without an adapter, the framework that would copy instead;
    `aligned_source`: the source's adapter declares `AlignedAllocator` (say how to align).
    """
    name = target.name
    move = refusals(source, scaps, facts, target, tcaps, copy=copy, device=device)
    block = blockers(
        source,
        scaps,
        facts,
        tcaps,
        name,
        copy=copy,
        device=device,
        move=move,
        policy=policy,
        aligned_source=aligned_source,
        numpy_copies=numpy_copies,
    )
    reasons = [*block.reasons]
    if reasons and copy is False:
        raise _forbid(source, name, reasons)
    copy_at, steps, capsule = copy_placement(
        source,
        scaps,
        facts,
        name,
        export,
        block,
        copy=copy,
        device=device,
        move=move,
        intermediary=intermediary,
    )
    if copy_at == MOVE_ON_IMPORT:
        return _plan(source, name, facts, [export, *steps], reasons, copy_at)
    tail = delivery(capsule, tcaps, name)
    if copy_at == AT_IMPORT:
        last = tail[-1]
        assert isinstance(last, Import)
        what = (
            "the buffer" if block.always_copies or not block.unaligned else "the unaligned buffer"
        )
        why = f"its importer copies {what}"
        tail = (*tail[:-1], replace(last, why=why, copies=True, exchange_api=False))
    steps = [export, *steps, *tail]
    if move == MOVE_AT_TARGET:
        assert device is not None
        steps.append(MoveAtTarget(name, f"move from {facts.device} to {device}", device=device))
        copy_at = MOVE_AT_TARGET
    steps += notes(source, scaps, facts, tcaps, name, copy_at)
    return _plan(source, name, facts, steps, reasons, copy_at)


def refusals(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    target: Adapter,
    tcaps: Capabilities,
    *,
    copy: bool | None,
    device: Device | None,
) -> str | None:
    """Raise the typed error of a conversion no copy can make (the framework, the device, the
    dtype), else return how a move to `device` is made (MOVE_AT_*), or None for no move. The
    target's answers (`unavailable`, `device_unavailable`, `refusal`) are declared to depend
    only on the facts and on what its capabilities reflect."""
    name = target.name
    what = f"{facts.dtype} tensor from {source}"
    # The framework first: no device advice for one that is not installed.
    absent = None if target.installed() else target.unavailable()
    if absent:
        raise FrameworkNotInstalledError(f"cannot convert to {name}: {absent}")
    where = device or facts.device
    source_moves = frozenset() if scaps is None else (scaps.moves_to or scaps.devices)
    missing = _device_missing(source, target, tcaps, where, device, source_moves)
    if missing:
        raise DeviceError(f"{name} cannot hold a {what} on {where}: {missing}")
    unavailable = target.unavailable()  # (installed, but unusable here: no GPU...)
    if unavailable:
        raise FrameworkNotInstalledError(f"cannot convert to {name}: {unavailable}")
    move: str | None = None
    if device is not None and device != facts.device:
        if copy is False:
            raise _forbid(source, name, [_moved(facts, device)])
        if device.type in source_moves and scaps is not None:
            move = MOVE_AT_SOURCE
        elif facts.device.type in tcaps.devices and not target.device_unavailable(facts.device):
            move = MOVE_AT_TARGET
        elif facts.device.type in tcaps.moves_from:
            move = MOVE_ON_IMPORT
        else:
            raise DeviceError(
                f"neither {source} nor {name} can move a {what} from {facts.device} to {device}"
            )
    # Dtypes (refused as what the target's own import raises too: Capabilities.import_errors).
    if facts.dtype not in tcaps.import_dtypes:
        why = tcaps.import_gaps.get(facts.dtype, f"{name} holds no {facts.dtype}")
        raise typed(UnsupportedDTypeError, *tcaps.import_errors)(
            f"{name} cannot import a {what}: {why} "
            f"(it imports {', '.join(sorted(tcaps.import_dtypes))}); "
            + cast_remedy(facts.dtype, tcaps.import_dtypes)
        )
    refusal = target.refusal(facts)
    if refusal:
        raise typed(UnsupportedDTypeError, *tcaps.import_errors)(
            f"{name} cannot import a {what}: {refusal}"
        )
    return move


def _moved(facts: Facts, device: Device) -> str:
    return f"the tensor is on {facts.device} and {device} was asked for"


def _device_missing(
    source: str,
    target: Adapter,
    tcaps: Capabilities,
    where: Device,
    device: Device | None,
    source_moves: frozenset[str],
) -> str | None:
    """Why the target cannot hold a tensor on `where` (with the `device=` that would help),
    or None."""
    if where.type not in tcaps.devices:
        missing = f"its adapter supports {', '.join(sorted(tcaps.devices))}"
        held = sorted(tcaps.devices & source_moves) if device is None else []
        if device is None and where.type in tcaps.moves_from:
            return f"{missing}; ask for device='{sorted(tcaps.devices)[0]}' to copy it there"
        if held:  # (JAX makes arrays on a GPU by default where it sees one)
            return f"{missing}; ask for device='{held[0]}' to have {source} copy it there"
        if device is not None:
            return f"{missing}; ask for one of those, or leave device= out"
        return missing
    if device is None and where.type == "cpu":
        return None  # host memory, whatever ordinal the producer gave it (JAX's cpu:k)
    return target.device_unavailable(where)


class Blockers(NamedTuple):
    """What stops sharing a tensor with the target (`reasons`, a move's first), and what that
    leaves: a compact copy on the source side, or the importer's own copy."""

    reasons: tuple[str, ...]
    compact_copy: bool  # the source side (or an intermediary) copies
    import_copies: bool  # the target's importer copies by itself
    unaligned: bool  # the data address is less aligned than the target shares
    always_copies: bool  # the target's importer never shares memory of this device
    #: the compact copy is asked by facts a route's key holds, not by KEYS_OMIT's or the policy
    keyed_copy: bool = False
    #: NumPy's copier makes the compact copy (over the exported memory)
    numpy_copies: bool = False


def blockers(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    tcaps: Capabilities,
    name: str,
    *,
    copy: bool | None,
    device: Device | None,
    move: str | None,
    policy: str,
    aligned_source: bool = False,
    numpy_copies: bool = False,
) -> Blockers:
    """Everything that stops the target sharing this tensor's memory, in a user's words, and
    who copies it then (`aligned_source`: the source can allocate aligned memory: say how;
    `numpy_copies`: NumPy is imported and can copy this tensor's memory)."""
    moved = [] if move is None else [_moved(facts, device)]  # type: ignore[arg-type]
    unshareable = _unshareable(source, scaps, facts, tcaps, name, move, policy)
    reasons = [*moved, *unshareable]
    compact_copy = bool(unshareable)
    align, on_unaligned = tcaps.alignment_on((device or facts.device).type)
    unaligned = align > facts.alignment and not facts.empty
    always_copies = facts.device.type in tcaps.import_copies  # MLX on CPU: never shares
    # NumPy copies the exported memory: not for a tensor whose export loses information
    numpy = numpy_copies and not facts.export_hazard
    numpy = numpy and (scaps is None or scaps.copy_through_numpy)
    # an importer's own copy of an unaligned buffer gives way to NumPy's aligned copy, which the
    # target then shares: JAX's copy took 4-5x as long here (68 against 13 us for 4 KB, 120
    # against 22 for 200 KB, 1.0 against 0.7 ms for 16 MB)
    numpy_first = numpy and unaligned and not always_copies
    import_copies = unaligned and on_unaligned == "copy" and not compact_copy and not numpy_first
    # the copy a route may replay is asked for whatever KEYS_OMIT's facts and the policy are:
    # they only add reasons, so do the others still ask at their least blocking values? (no
    # reason at all: none at those either, and a share asks nothing more); the alignment asks
    # for it where the importer refuses the buffer or NumPy copies first (keys hold that)
    keyed_copy = unaligned and (on_unaligned != "copy" or numpy_first)
    if unshareable and not keyed_copy:
        least = _keyed_only(facts)
        keyed_copy = bool(
            unshareable
            if least == facts and policy == SHARE
            else _unshareable(source, scaps, least, tcaps, name, move, SHARE)
        )
    if unaligned:
        reasons.append(
            f"{name} shares only {align}-byte aligned buffers on {(device or facts.device).type} "
            f"and this one is {facts.alignment}-byte aligned"
            + (ALIGNED_REMEDY if aligned_source and align <= ALIGNED_BYTES else "")
        )
        compact_copy = compact_copy or not import_copies
    if always_copies:
        reasons.append(f"{name}'s importer always copies {facts.device.type} memory")
        import_copies = not compact_copy
    if copy is True:
        reasons.append("copy=True asks for fresh memory")
    return Blockers(
        tuple(reasons), compact_copy, import_copies, unaligned, always_copies, keyed_copy, numpy
    )


def _keyed_only(facts: Facts) -> Facts:
    """`facts` with what route keys leave out (KEYS_OMIT) at the values that ask for no copy."""
    return facts._replace(
        read_only=facts.read_only and not facts.read_only_why,
        read_only_why="",
        address_taken=False,
    )


def _unshareable(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    tcaps: Capabilities,
    name: str,
    move: str | None,
    policy: str,
) -> list[str]:
    """Why the target cannot share this tensor as it is (its export, layout, offset,
    permissions, address, or the immutable policy): each asks for a compact copy."""
    reasons = []
    writable = tcaps.import_access == WRITABLE
    if facts.export_hazard:
        reasons.append(facts.export_hazard)
    if not tcaps.accepts_layout(facts.layout):
        reasons.append(
            f"{name} imports only {'/'.join(sorted(tcaps.import_layouts))} layouts and this "
            f"tensor is {facts.layout}"
            + (f" ({_LAYOUT_WORDS[facts.layout]})" if facts.layout in _LAYOUT_WORDS else "")
        )
    if facts.byte_offset and not tcaps.import_byte_offset:
        reasons.append(f"{name} ignores DLPack byte_offset and this tensor has one")
    if facts.read_only and writable:
        ro = facts.read_only_why or f"the {source} tensor is read-only"
        reasons.append(f"{ro} and {name} tensors are always writable")
    if facts.address_taken:
        reasons.append(
            f"{name} already holds an import of this memory and files each import's release "
            f"under its data address, one per address: a second import would drop the first "
            f"one's release (a leak)"
        )
    immutable_source = scaps is not None and scaps.immutable and not facts.read_only
    if immutable_source and writable and move is None:
        if facts.alias_hazard:
            reasons.append(facts.alias_hazard)
        elif policy == COPY:
            reasons.append(
                f"{source} buffers are immutable and the immutable policy is 'copy': "
                f"{name} could write them"
            )
    return reasons


def copy_placement(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    name: str,
    export: Export,
    block: Blockers,
    *,
    copy: bool | None,
    device: Device | None,
    move: str | None,
    intermediary: str | None,
) -> tuple[str | None, list[Step], Capsule]:
    """Where the copy is made (Plan.copy_at: None where nothing copies), its steps, and the
    capsule the importer then gets (a fresh one after a copy)."""
    if move == MOVE_ON_IMPORT:  # (the importer copies as it takes the capsule: no delivery)
        step: Step = ImportOnto(name, f"copy from {facts.device} onto {device}", device=device)  # type: ignore[arg-type]
        return MOVE_ON_IMPORT, [step], Capsule(facts.versioned, False, True, True)
    if move == MOVE_AT_SOURCE:
        assert device is not None
        why = f"move from {facts.device} to {device}"
        fresh_export = _fresh(export)
        step = MoveAtSource(source, why, device=device, export=fresh_export)
        return MOVE_AT_SOURCE, [step], Capsule(facts.versioned, False, True, True, device.type)
    numpy = block.numpy_copies
    if not (block.compact_copy or (copy is True and not block.import_copies and move is None)):
        read_only = facts.read_only or bool(scaps and scaps.immutable)
        shared = Capsule(
            facts.versioned, read_only, facts.deleter, facts.manager_ctx, facts.device.type
        )
        return (AT_IMPORT if block.import_copies else None), [], shared
    fresh_export = _fresh(export)
    versioned = export.versioned and (numpy or scaps is None or DLPACK in scaps.exports)
    fresh = Capsule(versioned, False, True, True, facts.device.type)
    if scaps is not None or numpy:
        how = "with NumPy over its memory" if numpy else "with its own copy"
        why = f"make a compact, aligned, writable copy {how}, then share it"
        step = CopyAtSource(source, why, export=fresh_export, numpy=numpy, keyed=block.keyed_copy)
        return AT_SOURCE, [step], fresh
    if intermediary is not None:
        why = "import the capsule, copy it compactly, then share the copy"
        return AT_INTERMEDIARY, [CopyAtSource(intermediary, why, export=fresh_export)], fresh
    raise UnsupportedLayoutError(
        f"{name} cannot import this {facts.layout} {facts.dtype} tensor from {source} and no "
        "imported framework can copy it first (import numpy): " + "; ".join(block.reasons)
    )


@lru_cache(maxsize=64)
def _fresh(export: Export) -> Export:
    """`export` as the step that takes a capsule of the copy (cached: one per export)."""
    return replace(export, why="take a DLPack capsule of the copy")


def notes(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    tcaps: Capabilities,
    name: str,
    copy_at: str | None,
) -> list[Step]:
    """What a person should know about the conversion that changes nothing in it."""
    said: list[Step] = []
    if scaps is not None and facts.device.type in STREAM_DEVICES and DLPACK not in scaps.exports:
        said.append(
            Note(
                source,
                f"{source} exports legacy capsules, which carry no stream: its adapter waits "
                f"for the tensor's pending work before export instead",
            )
        )
    if copy_at is None and scaps is not None and scaps.immutable:
        if tcaps.import_access == WRITABLE:
            said.append(
                Note(
                    source,
                    f"the result aliases an immutable {source} buffer; writing through it also "
                    f"changes the {source} array (interop.immutable_policy('copy') copies instead)",
                )
            )
        elif tcaps.import_access != IMMUTABLE:
            said.append(
                Note(source, f"the result aliases an immutable {source} buffer and is read-only")
            )
    limited = tcaps.dtype_notes.get(facts.dtype)
    if limited:
        said.append(Note(name, limited))
    return said


def _plan(
    source: str,
    name: str,
    facts: Facts,
    steps: list[Step],
    reasons: list[str],
    copy_at: str | None,
) -> Plan:
    """The plan; `plain` when a route may take it: export, a bridge, a deferring re-wrap
    (which routes make themselves), import and notes."""
    steady: tuple[type, ...] = (Export, Bridge, Import, Note)
    plain = copy_at is None and all(
        (isinstance(s, steady) or (isinstance(s, Rewrap) and s.defer))
        and not getattr(s, "stream", None)
        for s in steps
    )
    return Plan(
        source,
        name,
        facts.dtype,
        facts.device,
        facts.layout,
        zero_copy=copy_at is None,
        steps=tuple(steps),
        reasons=tuple(reasons),
        copy_at=copy_at,
        plain=plain,
    )


def choose_route(
    plan: Plan,
    facts: Facts,
    source: Any,
    target: Any,
    scaps: Capabilities | None,
    tcaps: Capabilities,
    device: Device | None,
    export: Export,
    copy: bool | None = None,
    host_copier: Any = None,
) -> RouteChoice:
    """Whether `plan` may be remembered as a route, and its exporter and importer (from the
    adapters' fast-path hooks, `source` and `target`), or its copier. Every blocker is here:
    the routes, compiled and pure, only replay what this says. A hook that raises is a
    reason, never a failed conversion. `host_copier`: the adapter whose `host_copier_of`
    hook makes NumPy's copies of other frameworks' memory."""
    why = ""
    copies = not plan.zero_copy
    if plan.identity:
        why = "the same framework"
    elif facts.empty:  # (the compiled keys tell empties apart; the pure ones key none)
        why = "it has no elements, and an adapter may make its own empty tensor (MXNet does)"
    elif copies:
        why = _copy_not_remembered(plan, facts, copy)
    elif not plan.plain:
        why = "a step of the plan is decided per call"
    if why:
        pass
    elif source is None or scaps is None:
        why = "no adapter exports the source (a capsule or a protocol object)"
    elif device is not None:
        why = "device= was given"
    elif export.stream is not None:
        why = "the export hands a stream over"
    elif facts.device.type != "cpu":
        why = f"a {facts.device.type} export hands the consumer's stream over on every call"
    elif facts.dtype in tcaps.volatile_dtypes or facts.dtype in scaps.volatile_dtypes:
        why = f"a {facts.dtype} tensor may export unlike the last one"
    elif not copies and facts.read_only and not facts.read_only_why and tcaps.immutable:
        why = f"read-only memory shared into {target.name} is remembered call by call"
    if why:
        return RouteChoice(why)
    import_ = next(s for s in plan.steps if isinstance(s, Import))
    copier = None
    try:
        exporter = source.exporter(facts.versioned, tcaps.writes, facts.dtype)
        importer = None if copies else target.importer(import_.as_object, facts.dtype)
        if copies and exporter is not None:
            copier = _copier(plan, source, exporter, facts.dtype, host_copier)
    except Exception as exc:  # a private entry point a release renamed, say
        return RouteChoice(f"a fast-path hook failed ({type(exc).__name__}: {exc})")
    if exporter is not None and copies and copier is None:
        who = host_copier.name if host_copier is not None else "the host copier"
        return RouteChoice(f"{who} has no route copier for a {facts.dtype} tensor")
    if exporter is None or (importer is None and not copies):
        which = source.name if exporter is None else target.name
        return RouteChoice(f"{which} has no fast-path hook for a {facts.dtype} tensor")
    guarded = bool(scaps and scaps.immutable and tcaps.import_access == WRITABLE)
    return RouteChoice("", exporter, importer, copier, guarded)


def _copier(
    plan: Plan, source: Any, exporter: Callable[[Any], Any], dtype: str, host_copier: Any
) -> Callable[[Any], Any] | None:
    """The plan's copy as a function of the tensor: the source's own copy, or NumPy's copy
    of the memory `exporter` exports (its adapter's `host_copier_of` hook); None: none."""
    step = next(s for s in plan.steps if isinstance(s, CopyAtSource))
    if not step.numpy or source is host_copier:
        return source.copy  # (NumPy's own copy of a NumPy array: the same copy)
    return None if host_copier is None else host_copier.host_copier_of(exporter, dtype)


def _copy_not_remembered(plan: Plan, facts: Facts, copy: bool | None) -> str:
    """Why a copying plan is not remembered ("" where it is). A route replays one only where
    the source's own copy is the plan's copy, and only where the copy holds for every tensor
    the route's key stands for (the step says: `CopyAtSource.keyed`)."""
    if copy is not None:
        return "copy=True asks for fresh memory on every call"  # (copy=False never copies)
    step = next((s for s in plan.steps if isinstance(s, CopyAtSource)), None)
    if plan.copy_at != AT_SOURCE or step is None:
        return "the plan copies"
    if facts.export_hazard:  # (keys stand for no such tensor: adapters keep them off routes)
        return "the plan copies what the tensor's export would lose"
    if not step.keyed:
        return f"the copy depends on {_unkeyed(facts)}, which its key leaves out"
    return ""


def _unkeyed(facts: Facts) -> str:
    """Which of what keys leave out asks for the copy, in a user's words."""
    asking = [
        what
        for what, asks in (
            ("whether the core remembers the memory as read-only", facts.read_only_why),
            ("whether the target holds an import of the same address", facts.address_taken),
        )
        if asks
    ]
    return " and ".join(asking) or "the immutable policy"


def same_framework_plan(
    adapter: Adapter, info: TensorInfo | None, copy: bool | None, device: Device | None
) -> Plan:
    """A tensor converted to its own framework: itself, the framework's own copy, or a move."""
    name = adapter.name
    dtype = info.dtype if info else "?"
    here = info.device if info else Device("cpu")
    reasons: tuple[str, ...] = ()
    if device is not None and device != here:
        caps = adapter.capabilities()
        reach = caps.moves_to or caps.devices
        missing = (
            adapter.device_unavailable(device)
            if device.type in reach
            else (f"it moves tensors to {', '.join(sorted(reach))} only")
        )
        if missing:
            raise DeviceError(f"{name} cannot move a tensor from {here} to {device}: {missing}")
        reasons = (f"the tensor is on {here} and {device} was asked for",)
        if copy is False:
            raise CopyForbiddenError(f"copy=False, but the {name} tensor is {reasons[0][11:]}")
        step = SameFramework(name, reasons[0], device=device)
    elif copy:
        reasons = ("copy=True asks for fresh memory",)
        step = SameFramework(name, reasons[0], copy=True)
    else:
        step = SameFramework(name)
    return Plan(
        name,
        name,
        dtype,
        here,
        info.layout if info else "?",
        zero_copy=not reasons,
        steps=(step,),
        reasons=reasons,
        copy_at=None if not reasons else (MOVE_AT_SOURCE if step.device else AT_SOURCE),
        # the tensor itself (no copy, no move): later ones skip planning (`Routes.learn_same`)
        route=RouteChoice("the same framework, copied or moved" if reasons else ""),
    )


# --- checked casts (dtypes=) -------------------------------------------------------------------
#: dtypes a checked cast goes between: NumPy's own (it makes the cast on the host)
CASTABLE = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
    "complex64 complex128".split()
)


#: for a dtype a target cannot hold, the castable dtypes to suggest, nearest first
NEAREST = {
    "bool": ("uint8", "int8", "int32"),
    "int8": ("int16", "int32", "int64"),
    "int16": ("int32", "int64"),
    "int32": ("int64",),
    "int64": ("int32",),
    "uint8": ("int16", "uint16", "int32", "int64"),
    "uint16": ("int32", "uint32", "int64"),
    "uint32": ("int64", "uint64"),
    "uint64": ("int64",),
    "float16": ("float32", "float64"),
    "float32": ("float64",),
    "float64": ("float32",),
    "complex64": ("complex128",),
    "complex128": ("complex64",),
}


def cast_remedy(dtype: str, held: frozenset[str]) -> str:
    """What to do about a dtype the target cannot hold: cast it first, and where a checked
    cast reaches a dtype it holds, the `dtypes=` that asks interop to."""
    near = next((d for d in NEAREST.get(dtype, ()) if d in held), None)
    if near is None:
        return "cast it to one of those first, with the source framework's own call"
    return (
        f"cast it to one of those first, or have interop cast it, checked: "
        f"dtypes={{'{dtype}': '{near}'}}"
    )


@dataclass(frozen=True)
class Cast(Step):
    """Copy the tensor into `dtype` with NumPy over its host memory, after checking that every
    value fits (else CastError, naming the first that does not); the target then shares the
    copy. From `dtypes=` only: no cast is ever made unasked."""

    dtype: str = ""
    export: Export = field(default_factory=lambda: Export(""))
    action: ClassVar[str] = "cast"

    def run(self, conv: Conversion) -> None:
        conv.cast(self)


def negotiate_cast(
    source: str,
    scaps: Capabilities | None,
    facts: Facts,
    target: Adapter,
    tcaps: Capabilities,
    export: Export,
    cast: str,
    *,
    copy: bool | None,
    device: Device | None,
) -> Plan:
    """The plan of a conversion whose tensor `dtypes=` casts to `cast` first: export, (the
    source's own copy where its export would lose information), the checked cast on the host,
    then what `negotiate` plans for the fresh, compact, aligned copy."""
    what = f"{facts.dtype} tensor from {source}"
    asked = f"dtypes={{{facts.dtype!r}: {cast!r}}}"
    if not {facts.dtype, cast} <= CASTABLE:
        raise UnsupportedDTypeError(
            f"{asked} cannot cast a {what}: checked casts go between NumPy's dtypes only "
            f"({', '.join(sorted(CASTABLE))})"
        )
    if facts.device.type != "cpu":
        raise DeviceError(
            f"{asked} casts on the host only and this {what} is on {facts.device}: convert it "
            "with device='cpu' first, then cast"
        )
    if copy is False:
        raise CopyForbiddenError(
            f"copy=False, but {asked} asks for a cast, which copies the {what}"
        )
    steps: list[Step] = [export]
    fresh_export = replace(export, why="take a DLPack capsule of the copy")
    if facts.export_hazard:  # NumPy would read the memory without the lazy sign: copy first
        why = f"make a copy with its own copy first ({facts.export_hazard})"
        steps.append(CopyAtSource(source, why, export=fresh_export))
    why = (
        f"copy into {cast} with NumPy on the host, after checking that every value fits "
        f"({asked}; a value that does not is a CastError naming it)"
    )
    steps.append(Cast(source, why, dtype=cast, export=fresh_export))
    copied = facts._replace(
        dtype=cast,
        layout=CANONICAL,
        read_only=False,
        read_only_why="",
        byte_offset=False,
        alignment=64,
        versioned=export.versioned,
        deleter=True,
        manager_ctx=True,
        export_hazard="",
        alias_hazard="",
        address_taken=False,
    )
    rest = negotiate(source, None, copied, target, tcaps, fresh_export, copy=None, device=device)
    return replace(
        rest,
        dtype=facts.dtype,
        layout=facts.layout,
        zero_copy=False,
        steps=(*steps, *rest.steps[1:]),
        reasons=(f"{asked} asks for a cast, a copy", *rest.reasons),
        copy_at=rest.copy_at or AT_SOURCE,
        plain=False,
    )
