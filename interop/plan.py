"""Negotiation: from both sides' declared capabilities, decide how a conversion happens.

The plan is made before any memory moves and is what `explain` shows and `convert` executes,
so the two always agree. Plans depend only on a small key (frameworks, dtype, device, layout
class, read-only, alignment, copy mode), so they are cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .adapter import DLPACK, IMMUTABLE, WRITABLE, Adapter, Capabilities
from .dlpack import STREAM_DEVICES
from .errors import (
    CopyForbiddenError,
    DeviceError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
)
from .info import Device, TensorInfo

# Where a copy is made.
AT_SOURCE = "source"  # the source framework makes a compact, writable copy, which is shared
AT_IMPORT = "import"  # the target's importer copies by itself (JAX and unaligned buffers)
AT_INTERMEDIARY = "intermediary"  # a capsule no side can copy goes through another framework
MOVE_AT_SOURCE = "device-source"  # the source framework copies to the asked device
MOVE_AT_TARGET = "device-target"  # the target imports where the data is, then copies it
MOVE_ON_IMPORT = "device-import"  # the target copies from the source's device as it imports


@dataclass(frozen=True)
class Step:
    """One thing the conversion does, where, and why."""

    action: str
    where: str
    why: str = ""

    def __str__(self) -> str:
        return f"{self.action} ({self.where})" + (f": {self.why}" if self.why else "")


@dataclass(frozen=True)
class Plan:
    """How a conversion happens; `str(plan)` says why, for a person."""

    source: str
    target: str
    dtype: str
    device: Device
    layout: str
    zero_copy: bool
    copy_at: str | None
    steps: tuple[Step, ...]
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    identity: bool = False
    intermediary: str | None = None
    target_device: Device | None = field(default=None)

    def with_notes(self, notes: tuple[str, ...]) -> Plan:
        if not notes:
            return self
        steps = (Step("note", self.source, n) for n in notes)
        return Plan(
            **{**self.__dict__, "notes": self.notes + notes, "steps": (*steps, *self.steps)}
        )

    def __str__(self) -> str:
        head = f"{self.source} -> {self.target}, {self.dtype} on {self.device}, {self.layout}: "
        if self.identity:
            head += "same framework, " + ("fresh copy" if self.copy_at else "returned as is")
        elif self.zero_copy:
            head += "zero-copy (memory shared)"
        else:
            head += "copy (" + "; ".join(self.reasons) + ")"
        lines = [head, *(f"  {i}. {step}" for i, step in enumerate(self.steps, 1))]
        return "\n".join(lines)


def _forbid(source: str, target: str, reasons: list[str]) -> CopyForbiddenError:
    return CopyForbiddenError(
        f"copy=False, but {source} -> {target} cannot share memory: " + "; ".join(reasons)
    )


def negotiate(
    source: str,
    scaps: Capabilities | None,
    info: TensorInfo,
    target: Adapter,
    tcaps: Capabilities,
    *,
    copy: bool | None,
    device: Device | None,
    can_copy_at_source: bool,
    intermediary: str | None = None,
) -> Plan:
    """Plan a conversion of a tensor described by `info` from `source` into `target`."""
    name = target.name
    what = f"{info.dtype} tensor from {source}"
    steps: list[Step] = [Step("export", source, "take a DLPack capsule")]
    reasons: list[str] = []
    notes: list[str] = []
    copy_at: str | None = None
    target_device = None
    move_at_target = False

    where = device or info.device
    missing: str | None
    if where.type not in tcaps.devices:
        missing = f"its adapter supports {', '.join(sorted(tcaps.devices))}"
        if device is None and where.type in tcaps.moves_from:
            missing += f"; ask for device='{sorted(tcaps.devices)[0]}' to copy it there"
    else:
        missing = target.device_unavailable(where)
    if missing:
        raise DeviceError(f"{name} cannot hold a {what} on {where}: {missing}")
    if device is not None and device != info.device:
        target_device = device
        reasons.append(f"the tensor is on {info.device} and {device} was asked for")
        if copy is False:
            raise _forbid(source, name, reasons)
        source_moves = frozenset() if scaps is None else (scaps.moves_to or scaps.devices)
        if device.type in source_moves and can_copy_at_source:
            copy_at = MOVE_AT_SOURCE
        elif info.device.type in tcaps.devices and not target.device_unavailable(info.device):
            move_at_target = True
        elif info.device.type in tcaps.moves_from:
            copy_at = MOVE_ON_IMPORT
        else:
            raise DeviceError(
                f"neither {source} nor {name} can move a {what} from {info.device} to {device}"
            )
    if info.dtype not in tcaps.import_dtypes:
        why = tcaps.import_gaps.get(info.dtype, f"{name} holds no {info.dtype}")
        raise UnsupportedDTypeError(
            f"{name} cannot import a {what}: {why} "
            f"(it imports {', '.join(sorted(tcaps.import_dtypes))})"
        )

    refusal = target.refusal(info)
    if refusal:
        raise UnsupportedDTypeError(f"{name} cannot import a {what}: {refusal}")

    moved = len(reasons)  # reasons so far are about the device; the next ones about sharing
    layout = info.layout
    layout_ok = tcaps.accepts_layout(layout)
    if not layout_ok:
        reasons.append(
            f"{name} imports only {'/'.join(sorted(tcaps.import_layouts))} layouts and this "
            f"tensor is {layout} (shape {list(info.shape)}, strides {list(info.strides)})"
        )
    if info.byte_offset and not tcaps.import_byte_offset:
        reasons.append(f"{name} ignores DLPack byte_offset and this tensor has {info.byte_offset}")
    if info.read_only and tcaps.import_access == WRITABLE:
        reasons.append(f"the {source} tensor is read-only and {name} tensors are always writable")
    needs_compact_copy = len(reasons) > moved and copy_at is None
    align = tcaps.import_alignment
    unaligned = align > 1 and info.size > 0 and info.address % align != 0
    import_copies = unaligned and tcaps.unaligned_import == "copy" and not needs_compact_copy
    if unaligned:
        reasons.append(
            f"{name} shares only {align}-byte aligned buffers and this one is at "
            f"address % {align} = {info.address % align}"
        )
        if not import_copies:
            needs_compact_copy = True
    always_copies = info.device.type in tcaps.import_copies  # MLX on CPU: never shares
    if always_copies:
        reasons.append(f"{name}'s importer always copies {info.device.type} memory")
        import_copies = not needs_compact_copy
    if copy is True:
        reasons.append("copy=True asks for fresh memory")
    if reasons and copy is False:
        raise _forbid(source, name, reasons)

    if copy_at == MOVE_AT_SOURCE:
        steps.append(Step("copy", source, f"move from {info.device} to {target_device}"))
    elif copy_at == MOVE_ON_IMPORT:
        steps.append(Step("import", name, f"copy from {info.device} onto {target_device}"))
        return Plan(
            source,
            name,
            info.dtype,
            info.device,
            layout,
            zero_copy=False,
            copy_at=copy_at,
            steps=tuple(steps),
            reasons=tuple(reasons),
            target_device=target_device,
        )
    elif needs_compact_copy or (copy is True and not import_copies and not move_at_target):
        if can_copy_at_source:
            copy_at = AT_SOURCE
            steps.append(Step("copy", source, "make a compact, writable copy, then share it"))
        elif intermediary is not None:
            copy_at = AT_INTERMEDIARY
            steps.append(Step("copy", intermediary, "import the capsule, copy it compactly"))
        else:
            raise UnsupportedLayoutError(
                f"{name} cannot import this {layout} {what} and no installed framework can "
                f"copy it first: " + "; ".join(reasons)
            )
    elif import_copies:
        copy_at = AT_IMPORT
    if copy_at == AT_IMPORT or always_copies:
        what_copy = "the unaligned buffer" if unaligned and not always_copies else "the buffer"
        steps.append(Step("import", name, f"its importer copies {what_copy}"))
    else:
        steps.append(Step("import", name, "share the buffer through DLPack"))
    if move_at_target:
        steps.append(Step("copy", name, f"move from {info.device} to {target_device}"))
    if scaps is not None and info.device.type in STREAM_DEVICES and DLPACK not in scaps.exports:
        notes.append(
            f"{source} exports legacy capsules, which carry no stream: its adapter waits for "
            f"the tensor's pending work before export instead"
        )
    if copy_at is None and not move_at_target and scaps is not None and scaps.immutable:
        if tcaps.import_access == WRITABLE:
            notes.append(
                f"the result aliases an immutable {source} buffer; writing through it also "
                f"changes the {source} array"
            )
        elif tcaps.import_access != IMMUTABLE:
            notes.append(f"the result aliases an immutable {source} buffer and is read-only")
    plan = Plan(
        source,
        name,
        info.dtype,
        info.device,
        layout,
        zero_copy=copy_at is None and not move_at_target,
        copy_at=copy_at or (MOVE_AT_TARGET if move_at_target else None),
        steps=tuple(steps),
        reasons=tuple(reasons),
        intermediary=intermediary if copy_at == AT_INTERMEDIARY else None,
        target_device=target_device,
    )
    return plan.with_notes(tuple(notes))


def identity_plan(adapter: Adapter, info: TensorInfo | None, copy: bool | None) -> Plan:
    """A tensor converted to its own framework: itself, or the framework's own copy."""
    dtype = info.dtype if info else "?"
    device = info.device if info else Device("cpu")
    steps = (Step("copy", adapter.name, "copy=True asks for fresh memory"),) if copy else ()
    return Plan(
        adapter.name,
        adapter.name,
        dtype,
        device,
        info.layout if info else "?",
        zero_copy=not copy,
        copy_at=AT_SOURCE if copy else None,
        steps=steps,
        reasons=("copy=True asks for fresh memory",) if copy else (),
        identity=True,
    )
