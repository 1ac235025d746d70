"""Sharded arrays without a framework: meshes, shard specs, local shards, steps and refusals.

Both frameworks describe the same thing differently: JAX names mesh axes and says, per tensor
dimension, which axes split it (`PartitionSpec`); PyTorch says, per mesh dimension, which
tensor dimension it splits (`Shard(d)`) or that it holds copies (`Replicate()`). The neutral
form here is JAX's (per tensor dimension, the mesh axes splitting it, major first), because it
is what both sides can be written from and checked against without importing either.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..errors import DeviceError, InteropError
from ..info import Device
from ..step import Step

#: per tensor dimension, the mesh axes that split it, major first (a PartitionSpec); trailing
#: dimensions split by none may be left out, as a PartitionSpec may
Spec = tuple[tuple[str, ...], ...]


class ShardingError(InteropError):
    """A sharded array cannot be converted as asked."""


class PartialPlacementError(ShardingError, ValueError):
    """The array holds partial results (torch `Partial`, JAX `unreduced`) that must be reduced."""


class UnevenShardsError(ShardingError, ValueError):
    """A sharded dimension does not divide evenly over its mesh axes (JAX cannot hold it)."""


class UnsupportedShardingError(ShardingError, TypeError):
    """A sharding the other framework has no counterpart for (strided shards, axis orders)."""


class MeshMismatchError(ShardingError):
    """The source's mesh cannot be matched to the target's processes, ranks or devices."""


class RemoteShardError(ShardingError, DeviceError):
    """A shard lives on a device of another process or host than the calling one."""


@dataclass(frozen=True)
class MeshLayout:
    """A device mesh as both frameworks can rebuild it: axis names and sizes and, for every
    position (row-major), the process that holds it (JAX process index = torch rank)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    processes: tuple[int, ...]
    #: "cpu", "cuda" or "rocm"
    device_type: str
    #: JAX device ids per position when the mesh came from JAX, else None
    device_ids: tuple[int, ...] | None = None

    def coordinates(self, flat: int) -> tuple[int, ...]:
        """The mesh coordinates of row-major position `flat`."""
        coords = []
        for extent in reversed(self.shape):
            flat, rest = divmod(flat, extent)
            coords.append(rest)
        return tuple(reversed(coords))

    def grid(self) -> list[Any]:
        """The processes as nested lists in the mesh's shape (DeviceMesh's `mesh` argument)."""
        rows: list[Any] = list(self.processes)
        for extent in reversed(self.shape[1:]):
            rows = [rows[i : i + extent] for i in range(0, len(rows), extent)]
        return rows

    def __str__(self) -> str:
        axes = ", ".join(f"{n!r}: {s}" for n, s in zip(self.names, self.shape, strict=True))
        return f"{self.device_type} mesh ({axes}) over processes {self.grid()}"


def check_even(shape: tuple[int, ...], spec: Spec, mesh: MeshLayout) -> None:
    """Refuse dimensions that do not split evenly: JAX holds even shards only."""
    sizes = dict(zip(mesh.names, mesh.shape, strict=True))
    for dim, axes in enumerate(spec):
        parts = math.prod(sizes[a] for a in axes)
        if shape[dim] % parts:
            raise UnevenShardsError(
                f"dimension {dim} of the {list(shape)} array has {shape[dim]} elements split "
                f"over {parts} shards (mesh axes {axes}): uneven shards have no JAX counterpart; "
                f"pad it to a multiple of {parts} or shard another dimension"
            )


def shard_index(
    shape: tuple[int, ...], spec: Spec, mesh: MeshLayout, coords: tuple[int, ...]
) -> tuple[slice, ...]:
    """The global slice held at mesh position `coords` (even shards, major axis first)."""
    at = dict(zip(mesh.names, coords, strict=True))
    sizes = dict(zip(mesh.names, mesh.shape, strict=True))
    index = []
    for dim, axes in enumerate(spec + ((),) * (len(shape) - len(spec))):
        chunk, parts = 0, 1
        for axis in axes:
            chunk = chunk * sizes[axis] + at[axis]
            parts *= sizes[axis]
        step = shape[dim] // parts
        index.append(slice(chunk * step, (chunk + 1) * step))
    return tuple(index)


def spec_from_placements(
    placements: tuple[tuple[str, int], ...], names: tuple[str, ...], ndim: int
) -> Spec:
    """torch placements, as (kind, dim) per mesh dimension, to a spec. Mesh dimensions are read
    in order, which is torch's default: the first mesh dimension that shards a tensor dimension
    is the major one, as the first axis of a JAX tuple is."""
    dims: list[tuple[str, ...]] = [() for _ in range(ndim)]
    for name, (kind, dim) in zip(names, placements, strict=True):
        if kind == "shard":
            dims[dim] += (name,)
    while dims and not dims[-1]:
        dims.pop()
    return tuple(dims)


def placements_from_spec(spec: Spec, names: tuple[str, ...]) -> tuple[int | None, ...]:
    """Per mesh dimension, the tensor dimension it shards (None: replicated)."""
    order = {name: i for i, name in enumerate(names)}
    out: list[int | None] = [None] * len(names)
    for dim, axes in enumerate(spec):
        ranks = [order[a] for a in axes]
        if ranks != sorted(ranks):
            raise UnsupportedShardingError(
                f"dimension {dim} is split over mesh axes {axes} with {axes[0]!r} major, but "
                f"a DTensor splits over mesh dimensions in their order ({names}); reshard it "
                f"to P({tuple(sorted(axes, key=order.__getitem__))}) first"
            )
        for axis in axes:
            out[order[axis]] = dim
    return tuple(out)


def format_spec(spec: Spec) -> str:
    """As JAX prints a PartitionSpec."""

    def one(axes: tuple[str, ...]) -> str:
        return "None" if not axes else repr(axes[0]) if len(axes) == 1 else repr(axes)

    return "P(" + ", ".join(one(a) for a in spec) + ("," if len(spec) == 1 else "") + ")"


def format_placements(spec: Spec, names: tuple[str, ...]) -> str:
    """As torch prints a DTensor's placements tuple."""
    dims = placements_from_spec(spec, names)
    words = ["Replicate()" if d is None else f"Shard(dim={d})" for d in dims]
    return "(" + ", ".join(words) + ("," if len(words) == 1 else "") + ")"


def mapping(spec: Spec, mesh: MeshLayout, source: str) -> str:
    """Which placements the spec was read as, in the direction of the conversion."""
    jax_side = format_spec(spec)
    try:
        torch_side = format_placements(spec, mesh.names)
    except UnsupportedShardingError as exc:
        torch_side = f"no DTensor placements ({exc})"
    pair = f"{torch_side} -> {jax_side}" if source == "torch" else f"{jax_side} -> {torch_side}"
    return f"{pair} on the {mesh}"


@dataclass(frozen=True)
class LocalShard:
    """One shard held by this process: the tensor, where it sits in the global array, and the
    device the sharding puts it on (JAX's cpu:1, say, which DLPack would call cpu:0)."""

    data: Any
    index: tuple[slice, ...]
    device: Device
    #: its coordinates in the mesh; replicated shards differ only here
    position: tuple[int, ...]
    process: int


@dataclass(frozen=True)
class LocalShards:
    """The shards of a sharded array that this process holds, in one framework, with what it
    takes to rebuild the global array: what `convert` returns where the target has no
    distributed array to put them in. It never gathers; `interop.convert` of it into JAX or
    torch rebuilds the distributed array once the target can hold it."""

    framework: str
    shape: tuple[int, ...]
    dtype: str
    mesh: MeshLayout
    spec: Spec
    shards: tuple[LocalShard, ...]
    #: the framework the array came from, and why the result is not a distributed array
    source: str = ""
    why: str = ""

    def __len__(self) -> int:
        return len(self.shards)

    def __iter__(self) -> Iterator[LocalShard]:
        return iter(self.shards)

    def __getitem__(self, i: int) -> LocalShard:
        return self.shards[i]

    @property
    def partition_spec(self) -> str:
        return format_spec(self.spec)

    @property
    def placements(self) -> str:
        return format_placements(self.spec, self.mesh.names)

    def __repr__(self) -> str:
        return (
            f"LocalShards({len(self.shards)} {self.framework} shard(s) of a {self.dtype}"
            f"{list(self.shape)} array, {self.partition_spec} on the {self.mesh})"
        )


def renamed(shards: LocalShards, names: tuple[str, ...]) -> LocalShards:
    """The same shards with the mesh axes called `names` (position by position)."""
    if names == shards.mesh.names:
        return shards
    rename = dict(zip(shards.mesh.names, names, strict=True))
    spec = tuple(tuple(rename[a] for a in axes) for axes in shards.spec)
    return replace(shards, mesh=replace(shards.mesh, names=names), spec=spec)


@dataclass(frozen=True)
class Rehome(Step):
    """A JAX shard put on its mesh device without a copy (host memory is every CPU device's)."""

    action: ClassVar[str] = "place"


@dataclass(frozen=True)
class MoveShard(Step):
    """A shard copied to the device its mesh puts it on."""

    action: ClassVar[str] = "copy"
