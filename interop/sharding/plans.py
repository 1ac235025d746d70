"""A sharded conversion's plan, decided once for `convert` and `explain`: the steps that do it
(`ShardedSteps`, all that `convert` builds and runs), and what `explain` says of them
(`ShardedPlan`: the same steps, one per-tensor plan per local shard, and the whole).

Apart from `model`, which the adapter contract's sharding hooks name: these build on the
per-tensor `Plan`. The steps run on a sharded conversion in progress (`ShardedRun`, which
`dispatch` implements): a step holds what was decided, the run holds the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ..adapter import SHARDED_FORMER_NAMES as FORMER
from ..info import Device
from ..plan import Note, Plan, RouteChoice
from ..step import Step
from .model import LocalShards, MoveShard, mapping

#: what a sharded conversion returns: the source itself, the target's distributed array
#: rebuilt, or LocalShards
SAME, BUILD, LOCAL = "same", "build", "local shards"


class ShardedRun(Protocol):
    """What the steps run on: a sharded conversion in progress (`dispatch.ShardedConversion`)."""

    def reduce_partial(self, step: ReducePartial) -> None: ...
    def map_placements(self, step: MapPlacements) -> None: ...
    def convert_shards(self, step: ConvertShards) -> None: ...
    def place_shards(self, step: PlaceShards) -> None: ...
    def rebuild(self, step: Rebuild) -> None: ...
    def keep_local(self, step: KeepLocal) -> None: ...
    def return_source(self, step: ReturnSource) -> None: ...


# --- steps -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReducePartial(Note):
    """Pending sums all-reduced by the source framework's own collective (new memory); the
    shards are read again from the result. A note too: it is why the result is not shared."""

    hook: Any = None  # the source's ShardedArrays

    def run(self, conv: ShardedRun) -> None:
        conv.reduce_partial(self)


@dataclass(frozen=True)
class MapPlacements(Step):
    """The shards read put on the layout the target rebuilds (`layout`: the source's placements
    read as a spec, the mesh axes named as a given mesh names them)."""

    layout: LocalShards | None = field(default=None, compare=False)
    action: ClassVar[str] = "map"

    def run(self, conv: ShardedRun) -> None:
        conv.map_placements(self)

    def __str__(self) -> str:
        if self.layout is None:
            return super().__str__()
        shards = self.layout
        return f"map ({self.where}): {mapping(shards.spec, shards.mesh, shards.source)}"


@dataclass(frozen=True)
class ConvertShards(Step):
    """Each local shard through the per-tensor path (its own plan, listed per shard), handed
    over as the source's `export_shard` gives it (`export`: that hook, None for the shard
    itself); `through`: the calls of the hub the conversion was planned through
    (`interop.engine.Calls`), whose `convert` takes each shard."""

    copy: bool | None = None
    stream: Any = None
    export: Any = None
    through: Any = field(default=None, compare=False, repr=False)
    action: ClassVar[str] = "convert"

    def run(self, conv: ShardedRun) -> None:
        conv.convert_shards(self)


@dataclass(frozen=True)
class PlaceShards(Step):
    """Each converted shard put on the device its mesh position names (`devices`, from the
    target's `locate`), by the target's `place`: what each shard's `place_step` says."""

    hook: Any = None
    devices: tuple[Any, ...] = ()
    copy: bool | None = None
    action: ClassVar[str] = "place"

    def run(self, conv: ShardedRun) -> None:
        conv.place_shards(self)


@dataclass(frozen=True)
class Rebuild(Step):
    """The target's distributed array around the converted shards (its hook's `build`)."""

    hook: Any = None
    user_mesh: Any = None
    devices: tuple[Any, ...] = ()  # where each shard goes (the target's `locate`)
    copy: bool | None = None
    #: the shards as rebuilt, for the text
    layout: LocalShards | None = field(default=None, compare=False)
    action: ClassVar[str] = "build"

    def run(self, conv: ShardedRun) -> None:
        conv.rebuild(self)

    def __str__(self) -> str:
        if self.why or self.layout is None:
            return super().__str__()
        return f"build ({self.where}): {result_text(self.hook, self.layout, self.user_mesh)}"


@dataclass(frozen=True)
class KeepLocal(Step):
    """LocalShards of the converted shards: the target cannot hold them as one distributed
    array here (`why` says why)."""

    count: int = 0
    action: ClassVar[str] = "build"

    def run(self, conv: ShardedRun) -> None:
        conv.keep_local(self)

    def __str__(self) -> str:
        return f"build ({self.where}): {local_text(self.where, self.count, self.why)}"


@dataclass(frozen=True)
class ReturnSource(Step):
    """The array itself: it already is the target framework's, and no copy was asked for."""

    action: ClassVar[str] = "return"

    def run(self, conv: ShardedRun) -> None:
        conv.return_source(self)

    def __str__(self) -> str:
        return f"return ({self.where}): the {self.where} array itself (same framework)"


def result_text(hook: Any, shards: LocalShards, user_mesh: Any) -> str:
    """The distributed array the target's hook builds, for people (`result_text`; a hook
    written before the rename calls it `describe`)."""
    say = getattr(hook, "result_text", None) or getattr(hook, FORMER["result_text"])
    return str(say(shards, user_mesh))


def local_text(target: str, count: int, why: str) -> str:
    return (
        f"LocalShards: this process's {count} {target} shard(s) with their global indices and "
        f"devices, not gathered, because {why}"
    )


# --- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardedSteps:
    """What a sharded conversion does, decided once: the shards read (`shards`, what the steps
    start from), and the steps, which `convert` runs in order. The result's kind is decided
    here, by the last step, never by the run."""

    source: str
    target: str
    shards: LocalShards
    steps: tuple[Step, ...]

    @property
    def returns(self) -> str:
        """SAME, BUILD or LOCAL: what running the steps returns."""
        last = self.steps[-1]
        if isinstance(last, ReturnSource):
            return SAME
        return LOCAL if isinstance(last, KeepLocal) else BUILD

    @property
    def layout(self) -> LocalShards:
        """The shards as the target gets them (mapped), for what is said of them."""
        mapped = next((s for s in self.steps if isinstance(s, MapPlacements)), None)
        return self.shards if mapped is None or mapped.layout is None else mapped.layout

    @property
    def result(self) -> str:
        """What running the steps returns, for people."""
        last = self.steps[-1]
        if isinstance(last, Rebuild):
            if last.layout is None:
                return last.why or f"{self.target}'s distributed array"
            return result_text(last.hook, last.layout, last.user_mesh)
        if isinstance(last, KeepLocal):
            return local_text(last.where, last.count, last.why)
        return f"the {self.target} array itself (same framework)"


@dataclass(frozen=True)
class ShardPlan:
    """How one local shard converts: the per-tensor plan, and where it is placed after."""

    index: tuple[slice, ...]
    device: Device
    process: int
    plan: Plan
    #: a step after the per-tensor conversion (placing it on its mesh device), or None
    place: Step | None = None
    #: a step before it (handing a JAX host shard over from host device 0), or None
    before: Step | None = None

    @property
    def zero_copy(self) -> bool:
        return self.plan.zero_copy and not isinstance(self.place, MoveShard)

    def __str__(self) -> str:
        return self.text(detailed=False)

    def text(self, detailed: bool) -> str:
        """`str()`, or with the per-tensor plan's `details()`."""
        where = "[" + ", ".join(f"{s.start}:{s.stop}" for s in self.index) + "]"
        device = f"{self.device.type}:{self.device.id}"
        head = f"shard {where} on {device} (process {self.process}): "
        head += "zero-copy" if self.zero_copy else "copied"
        lines = [head]
        if self.before is not None:
            lines.append(f"  first {self.before}")
        plan = self.plan.details() if detailed else str(self.plan)
        lines += ["  " + line for line in plan.splitlines()]
        if self.place is not None:
            lines.append(f"  then {self.place}")
        return "\n".join(lines)


#: what a sharded plan says of remembered routes: each shard's own plan says whether its
#: conversion takes one
SHARD_ROUTES = RouteChoice(
    "a sharded array is planned on every call; each shard's plan says whether its conversion "
    "takes a remembered route"
)


@dataclass(frozen=True)
class ShardedPlan(Plan):
    """The plan for a sharded array: the mapping of placements used, the result built, and
    one plan per local shard. `zero_copy` holds when every shard is shared. Its `steps` are
    the decision's (`decision`), which `convert` runs: `interop.sharding.dispatch.run`."""

    shape: tuple[int, ...] = ()
    mapping: str = ""
    result: str = ""
    shards: tuple[ShardPlan, ...] = field(default=())
    decision: ShardedSteps | None = field(default=None, compare=False)

    @property
    def returns(self) -> str:
        """SAME, BUILD or LOCAL: what `convert` returns ("" for a plan made by hand)."""
        return "" if self.decision is None else self.decision.returns

    def _text(self, detailed: bool) -> str:
        copied = sum(not s.zero_copy for s in self.shards)
        state = f"{copied} of {len(self.shards)} shard(s) copied" if copied else "zero-copy"
        if not self.zero_copy and not copied:
            state = "copied first (see the note)"
        lines = [
            f"{self.source} -> {self.target}, sharded {self.dtype}{list(self.shape)}, "
            f"{len(self.shards)} local shard(s): {state}",
            f"  mapping: {self.mapping}",
            f"  result: {self.result}",
            *(f"  note: {n}" for n in self.notes),
        ]
        for shard in self.shards:
            lines += ["  " + line for line in shard.text(detailed).splitlines()]
        return "\n".join(lines)
