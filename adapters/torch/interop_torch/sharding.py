"""`TorchAdapter.sharded()`: a torch `DTensor` for the core's sharded conversion.

The type checks here are cheap and import nothing; the reading and building (in
`interop_torch.dtensor`, with the core's sharding model) load with the first DTensor.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interop.plan import Step
    from interop.sharding.model import LocalShards


def _impl() -> Any:
    """The working module, imported on first use (once: this runs on every hook call)."""
    found = sys.modules.get(f"{__package__}.dtensor")
    if found is None:
        from . import dtensor as found
    return found


class TorchSharded:
    """`interop.adapter.ShardedArrays` for PyTorch: `DTensor`, one local shard per rank."""

    label = "torch (DTensor)"
    mesh_name = "DeviceMesh"

    # --- as a source ----------------------------------------------------------------------------
    def is_array_type(self, kind: type) -> bool:
        # DTensor exists only once torch.distributed.tensor is imported; types made before
        # it are not DTensors
        dtensor = sys.modules.get("torch.distributed.tensor")
        return dtensor is not None and issubclass(kind, dtensor.DTensor)

    def is_sharded(self, x: Any, mesh_asked: bool) -> bool:
        return True  # a DTensor always converts shard by shard

    def partial(self, x: Any) -> str:
        dims = _impl().partial_dims(x)
        if not dims:
            return ""
        return (
            f"Partial placements over mesh dimension(s) {dims} are all-reduced first into new "
            "memory (DTensor.redistribute, torch's own collective)"
        )

    def refuse_partial(self, x: Any, target: str | None = None) -> Exception:
        return _impl().refuse_partial(x, target)  # type: ignore[no-any-return]

    def reduce_partial(self, x: Any) -> Any:
        return _impl().reduce_partial(x)

    def read(self, x: Any, partial_as_reduced: bool = False) -> LocalShards:
        return _impl().read(x, partial_as_replicate=partial_as_reduced)  # type: ignore[no-any-return]

    def mesh_of(self, x: Any) -> Any:
        return x.device_mesh

    def export_shard(self, data: Any) -> tuple[Any, Step | None]:
        return data, None

    def processes(self) -> tuple[int, int] | str:
        dist = _impl().distributed()
        if dist is None:
            return "the shards' torch ranks have no process group here"
        return dist.get_rank(), dist.get_world_size()

    # --- as a target ----------------------------------------------------------------------------
    def is_mesh(self, device: Any) -> bool:
        return _impl().is_device_mesh(device)  # type: ignore[no-any-return]

    def context(
        self, shards: LocalShards, origin: tuple[int, int] | None, user_mesh: Any
    ) -> str | None:
        impl = _impl()
        if impl.distributed() is None:
            return "torch.distributed is not initialised in this process"
        impl.context(shards.mesh, origin, shards.source)
        if user_mesh is not None:
            impl.check_mesh(user_mesh, shards.mesh)
        return None

    def fit(self, shards: LocalShards, user_mesh: Any) -> LocalShards:
        return shards  # placements follow mesh dimensions by position, whatever their names

    def locate(self, shards: LocalShards, user_mesh: Any) -> list[Any]:
        if len(shards) != 1:
            from interop.sharding.model import MeshMismatchError

            raise MeshMismatchError(
                f"a DTensor holds one shard per rank, and this process holds {len(shards)}"
            )
        return []

    def place_step(self, data: Any, where: Any, copy: bool | None) -> Step | None:
        return None

    def place(self, array: Any, where: Any, copy: bool | None) -> Any:
        return array  # a DTensor's one local shard stays on its rank's device

    def result_text(self, shards: LocalShards, user_mesh: Any) -> str:
        from interop.sharding.model import format_placements

        placements = format_placements(shards.spec, shards.mesh.names)
        return (
            f"a DTensor with placements {placements} on {_impl().describe(shards.mesh, user_mesh)}"
        )

    def build(
        self,
        shards: LocalShards,
        arrays: list[Any],
        where: list[Any],
        copy: bool | None,
        user_mesh: Any,
    ) -> Any:
        impl = _impl()
        mesh = user_mesh or impl.device_mesh(shards.mesh)
        return impl.build(shards, arrays[0], mesh)


#: the one hook object `TorchAdapter.sharded()` returns
HOOK = TorchSharded()
