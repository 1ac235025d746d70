"""The JAX side of `interop.sharding`: read a sharded `jax.Array` into its local shards, and
assemble a global one (what `interop_jax.sharding.JaxSharded` hands the core).

Only called once JAX is imported (a JAX array exists, or JAX is the target). Each shard goes
through the per-tensor `interop.convert`; this module only decides which JAX device each
shard belongs on. DLPack names every host buffer cpu:0 while JAX's CPU devices are cpu:0..n,
so a shard imported from DLPack lands on cpu:0 and is re-homed onto its mesh device with
`jax.device_put` of a NumPy view, which JAX aliases for aligned host buffers (every buffer
JAX's importer returns is aligned): no copy.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

from interop.errors import CopyForbiddenError, UnsupportedTensorError
from interop.info import Device, compact_strides
from interop.plan import Step
from interop.sharding.model import (
    LocalShard,
    LocalShards,
    MeshLayout,
    MeshMismatchError,
    MoveShard,
    PartialPlacementError,
    Rehome,
    RemoteShardError,
    Spec,
    UnsupportedShardingError,
    check_even,
)


def device_type(device: Any) -> str:
    if device.platform == "cpu":
        return "cpu"
    version = str(getattr(device.client, "platform_version", "")).lower()
    return "rocm" if "rocm" in version else "cuda" if device.platform == "gpu" else device.platform


def _backend(kind: str) -> str:
    return "cpu" if kind == "cpu" else "gpu"


def _spec(spec: Any) -> Spec:
    if getattr(spec, "unreduced", None):
        raise PartialPlacementError(
            f"the JAX array is unreduced over mesh axes {sorted(spec.unreduced)} (partial "
            f"sums): reduce it first (jax.lax.psum, or jax.sharding.reshard to a reduced spec)"
        )
    out: list[tuple[str, ...]] = []
    for entry in tuple(spec):
        if entry is None:
            out.append(())
        elif isinstance(entry, str):
            out.append((entry,))
        elif isinstance(entry, tuple) and all(isinstance(a, str) for a in entry):
            out.append(entry)
        else:
            raise UnsupportedShardingError(f"cannot convert a PartitionSpec entry {entry!r}")
    return tuple(out)


def _full(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape, strict=True))


@lru_cache(maxsize=256)
def _described(sharding: Any, shape: tuple[int, ...]) -> tuple[MeshLayout, Spec, dict[Any, Any]]:
    """The mesh layout and spec of a NamedSharding, and for each device its mesh coordinates
    and the global index of its shard."""
    mesh = sharding.mesh
    flat = list(mesh.devices.flat)
    layout = MeshLayout(
        tuple(mesh.axis_names),
        tuple(mesh.devices.shape),
        tuple(d.process_index for d in flat),
        device_type(flat[0]),
        tuple(d.id for d in flat),
    )
    spec = _spec(sharding.spec)
    check_even(shape, spec, layout)
    indices = sharding.devices_indices_map(shape)
    where = {d: (layout.coordinates(i), _full(indices[d], shape)) for i, d in enumerate(flat)}
    return layout, spec, where


def read(x: Any) -> LocalShards:
    """The shards of `x` this process holds (single-device JAX arrays), with the mesh and
    spec, and each shard's device as the sharding says (not as DLPack would)."""
    import jax

    sharding = x.sharding
    if not isinstance(sharding, jax.sharding.NamedSharding):
        raise UnsupportedShardingError(
            f"cannot convert a JAX array with a {type(sharding).__name__}: only NamedSharding "
            f"has a mesh and a PartitionSpec to map; jax.device_put it onto a NamedSharding"
        )
    if x.is_deleted():
        raise UnsupportedTensorError("cannot convert a deleted (donated) JAX array")
    shape = tuple(x.shape)
    layout, spec, where = _described(sharding, shape)
    shards = []
    for s in x.addressable_shards:
        device = s.device
        coords, index = where[device]
        kind = Device(layout.device_type, device.id)
        shards.append(LocalShard(s.data, index, kind, coords, device.process_index))
    return LocalShards("jax", shape, str(x.dtype), layout, spec, tuple(shards), source="jax")


def context(layout: MeshLayout, ranks: tuple[int, int] | None) -> str | None:
    """Why JAX cannot hold these shards as one global array here (None: it can).
    `ranks`: (this process's index, the process count) in the framework that numbered the
    shards' processes (torch's rank and world size for a DTensor's)."""
    import jax

    if layout.device_ids is not None:  # a JAX mesh: its devices must be this JAX's
        known = {d.id: d for d in jax.devices(_backend(layout.device_type))}
        missing = [i for i in layout.device_ids if i not in known]
        if missing:
            raise MeshMismatchError(
                f"the shards' JAX mesh names devices {missing} that this JAX does not have "
                f"({sorted(known)})"
            )
        return None
    if ranks is None:
        raise MeshMismatchError(
            f"the shards' {layout} names no JAX devices and comes from no framework whose "
            f"processes are known here: convert them from the framework they came from"
        )
    rank, world = ranks
    count = jax.process_count()
    if count == 1 and world > 1:
        return f"jax.distributed is not initialised (1 JAX process for {world} torch ranks)"
    if count != world or jax.process_index() != rank:
        raise MeshMismatchError(
            f"torch rank {rank} of {world} cannot be matched to JAX process "
            f"{jax.process_index()} of {count}: start one JAX process per torch rank, "
            f"with jax.distributed.initialize(process_id=rank)"
        )
    return None


def mesh_devices(layout: MeshLayout, local: Device | None, user_mesh: Any = None) -> list[Any]:
    """The JAX device at every mesh position: by id for a JAX mesh, else the device of the
    position's process (the one with this rank's local hardware id when it has several)."""
    if user_mesh is None:
        return list(_mesh_devices(layout, None if local is None else local.id))
    found = list(user_mesh.devices.flat)
    processes = tuple(d.process_index for d in found)
    if tuple(user_mesh.devices.shape) != layout.shape or processes != layout.processes:
        raise MeshMismatchError(
            f"the given Mesh {dict(user_mesh.shape)} over processes {list(processes)} does not "
            f"match the shards' {layout}"
        )
    return found


@lru_cache(maxsize=256)
def _mesh_devices(layout: MeshLayout, local_id: int | None) -> tuple[Any, ...]:
    import jax

    devices = jax.devices(_backend(layout.device_type))
    if layout.device_ids is not None:
        by_id = {d.id: d for d in devices}
        return tuple(by_id[i] for i in layout.device_ids)
    out = []
    for process in layout.processes:
        candidates = [d for d in devices if d.process_index == process]
        if len(candidates) > 1 and local_id is not None:
            candidates = [d for d in candidates if d.local_hardware_id == local_id]
        if len(candidates) != 1:
            raise MeshMismatchError(
                f"JAX process {process} has {len(candidates)} {layout.device_type} devices "
                f"that could hold torch rank {process}'s shard; pass device=jax.sharding.Mesh"
            )
        out.append(candidates[0])
    return tuple(out)


def landing(data: Any) -> Any:
    """The JAX device JAX's DLPack importer puts a tensor on (from its DLPack device)."""
    import jax

    from interop import inspect

    where = inspect(data).device
    for device in jax.local_devices(backend=_backend(where.type)):
        if device.local_hardware_id == where.id:
            return device
    return None


def host_alias(data: Any) -> tuple[Any, Step | None]:
    """A JAX shard on host device k > 0 as an alias on host device 0, and the step that says so.

    JAX's capsules name host device k as DLPack's cpu:k, which consumers (and the core) know
    only as cpu:0; all of them are host memory, so the same buffer is handed over from
    device 0 instead (a NumPy view put there, which JAX aliases). Checked by address."""
    import jax
    import numpy as np

    (device,) = data.devices()
    if device.platform != "cpu" or device.local_hardware_id == 0:
        return data, None
    (home,) = [d for d in jax.local_devices(backend="cpu") if d.local_hardware_id == 0]
    alias = jax.device_put(np.asarray(data), home)
    if alias.unsafe_buffer_pointer() != data.unsafe_buffer_pointer():
        raise CopyForbiddenError(  # never a hidden copy: this JAX did not alias host memory
            f"this JAX ({jax.__version__}) copied a shard from {device} to {home} instead of "
            f"aliasing its host memory"
        )
    why = f"hand it over from {home}, the same host memory: DLPack consumers know one host device"
    return alias, Rehome("jax", why)


def place_step(found: Any, wanted: Any, copy: bool | None) -> Step | None:
    """What placing an imported shard on its mesh device costs (None: it is there)."""
    if found == wanted:
        return None
    if wanted.platform == "cpu":
        return Rehome(
            "jax",
            f"re-home it from {found} onto {wanted} without a copy: JAX's CPU devices share "
            f"host memory, which DLPack calls cpu:0 whatever JAX device holds it",
        )
    if copy is False:
        raise CopyForbiddenError(
            f"copy=False, but the shard arrives on {found} and the mesh puts it on {wanted}"
        )
    return MoveShard("jax", f"move from {found} to {wanted} (jax.device_put)")


def place(array: Any, wanted: Any, copy: bool | None) -> Any:
    import jax
    import numpy as np

    (found,) = array.devices()
    step = place_step(found, wanted, copy)
    if step is None:
        return array
    if isinstance(step, MoveShard):
        return jax.device_put(array, wanted)
    moved = jax.device_put(np.asarray(array), wanted)
    if moved.unsafe_buffer_pointer() != array.unsafe_buffer_pointer() and copy is False:
        raise CopyForbiddenError(  # a JAX that copies here: never hand back a copy
            f"copy=False, but this JAX ({jax.__version__}) copied the shard from {found} to "
            f"{wanted} instead of aliasing its host memory"
        )
    return moved


def wanted_devices(shards: LocalShards, devices: tuple[Any, ...]) -> list[Any]:
    """The JAX device each local shard belongs on; refused when one is another process's or
    when this process's shards do not cover exactly its devices in the mesh."""
    import jax

    strides = compact_strides(shards.mesh.shape)  # of the mesh, row-major
    wanted = [
        devices[sum(c * s for c, s in zip(sh.position, strides, strict=True))] for sh in shards
    ]
    me = jax.process_index()
    for device in wanted:
        if device.process_index != me:
            raise RemoteShardError(
                f"a shard belongs on {device} of JAX process {device.process_index}, but this "
                f"is process {me}: each process converts only its own shards"
            )
    here = {d for d in devices if d.process_index == me}
    if set(wanted) != here or len(wanted) != len(here):
        raise MeshMismatchError(
            f"this process holds shards for JAX devices {sorted(d.id for d in wanted)}, but "
            f"the mesh puts {sorted(d.id for d in here)} here"
        )
    return wanted


def assemble(
    shards: LocalShards, placed: list[Any], devices: tuple[Any, ...], user_mesh: Any = None
) -> Any:
    """The global array over the shards' mesh (or the given one, axes named as it names
    them), from this process's shards (JAX arrays, each on its mesh device: `place`)."""
    import jax

    if user_mesh is None:
        sharding = _sharding(shards.mesh, shards.spec, devices)
    else:
        sharding = jax.sharding.NamedSharding(user_mesh, partition_spec(shards.spec))
    return jax.make_array_from_single_device_arrays(shards.shape, sharding, placed)


@lru_cache(maxsize=256)
def _sharding(layout: MeshLayout, spec: Spec, devices: tuple[Any, ...]) -> Any:
    import jax
    import numpy as np

    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    mesh = jax.sharding.Mesh(grid.reshape(layout.shape), layout.names)
    return jax.sharding.NamedSharding(mesh, partition_spec(spec))


def partition_spec(spec: Spec) -> Any:
    import jax

    entries = (axes[0] if len(axes) == 1 else axes or None for axes in spec)
    return jax.sharding.PartitionSpec(*entries)


def is_mesh(device: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(device, jax.sharding.Mesh)
