"""What `explain` says of a sharded conversion: one plan per local shard, and the whole.

Apart from `model`, which the adapter contract's sharding hooks name: these build on the
per-tensor `Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..info import Device
from ..plan import Plan
from ..step import Step
from .model import MoveShard


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
        where = "[" + ", ".join(f"{s.start}:{s.stop}" for s in self.index) + "]"
        device = f"{self.device.type}:{self.device.id}"
        head = f"shard {where} on {device} (process {self.process}): "
        head += "zero-copy" if self.zero_copy else "copied"
        lines = [head]
        if self.before is not None:
            lines.append(f"  first {self.before}")
        lines += ["  " + line for line in str(self.plan).splitlines()]
        if self.place is not None:
            lines.append(f"  then {self.place}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ShardedPlan(Plan):
    """The plan for a sharded array: the mapping of placements used, the result built, and
    one plan per local shard. `zero_copy` holds when every shard is shared."""

    shape: tuple[int, ...] = ()
    mapping: str = ""
    result: str = ""
    shards: tuple[ShardPlan, ...] = field(default=())

    def __str__(self) -> str:
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
            lines += ["  " + line for line in str(shard).splitlines()]
        return "\n".join(lines)
