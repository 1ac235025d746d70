"""`JaxAdapter.sharded()`: a `jax.Array` over a mesh for the core's sharded conversion.

The type checks here are cheap and import nothing; the reading and assembling (in
`interop_jax.sharded`, with the core's sharding model) load with the first sharded array.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interop.plan import Step
    from interop.sharding.model import LocalShards


def _impl() -> Any:
    """The working module, imported on first use (once: this runs on every hook call)."""
    found = sys.modules.get(f"{__package__}.sharded")
    if found is None:
        from . import sharded as found
    return found


class JaxSharded:
    """`interop.adapter.ShardedArrays` for JAX: `NamedSharding` arrays over several devices."""

    label = "jax (sharded)"
    mesh_name = "jax.sharding.Mesh"

    def __init__(self) -> None:
        self._single_device: type | None = None

    # --- as a source ----------------------------------------------------------------------------
    def is_array_type(self, kind: type) -> bool:
        jax = sys.modules["jax"]
        return issubclass(kind, jax.Array) and not issubclass(kind, jax.core.Tracer)

    def is_sharded(self, x: Any, mesh_asked: bool) -> bool:
        sharding = x.sharding
        if self._single_device is None:
            self._single_device = sys.modules["jax"].sharding.SingleDeviceSharding
        if type(sharding) is self._single_device:
            return False
        # a one-device NamedSharding is a plain array, unless another framework's mesh is asked
        return len(sharding.device_set) > 1 or mesh_asked

    def partial(self, x: Any) -> str:
        return ""  # an unreduced spec is refused by read(): JAX has no reduction to ask for

    def refuse_partial(self, x: Any, target: str | None = None) -> Exception:
        from interop.sharding.model import PartialPlacementError

        return PartialPlacementError(
            "the JAX array holds unreduced sums: reduce it first (jax.lax.psum)"
        )

    def reduce_partial(self, x: Any) -> Any:
        return x

    def read(self, x: Any, partial_as_reduced: bool = False) -> LocalShards:
        return _impl().read(x)  # type: ignore[no-any-return]

    def mesh_of(self, x: Any) -> Any:
        return x.sharding.mesh

    def export_shard(self, data: Any) -> tuple[Any, Step | None]:
        return _impl().host_alias(data)  # type: ignore[no-any-return]

    def processes(self) -> tuple[int, int] | str:
        jax = sys.modules["jax"]
        return jax.process_index(), jax.process_count()

    # --- as a target ----------------------------------------------------------------------------
    def is_mesh(self, device: Any) -> bool:
        jax = sys.modules.get("jax")
        return jax is not None and isinstance(device, jax.sharding.Mesh)

    def context(
        self, shards: LocalShards, origin: tuple[int, int] | None, user_mesh: Any
    ) -> str | None:
        why = _impl().context(shards.mesh, origin)
        if why and user_mesh is not None:
            from interop.sharding.model import MeshMismatchError

            raise MeshMismatchError(f"cannot rebuild over the given Mesh: {why}")
        return why  # type: ignore[no-any-return]

    def fit(self, shards: LocalShards, user_mesh: Any) -> LocalShards:
        if user_mesh is None:
            return shards
        from interop.sharding.model import renamed

        return renamed(shards, tuple(user_mesh.axis_names))

    def _devices(self, shards: LocalShards, user_mesh: Any) -> tuple[Any, ...]:
        local = shards.shards[0].device if shards.shards else None
        return tuple(_impl().mesh_devices(shards.mesh, local, user_mesh))

    def locate(self, shards: LocalShards, user_mesh: Any) -> list[Any]:
        return _impl().wanted_devices(shards, self._devices(shards, user_mesh))  # type: ignore[no-any-return]

    def place_step(self, data: Any, where: Any, copy: bool | None) -> Step | None:
        impl = _impl()
        return impl.place_step(impl.landing(data), where, copy)  # type: ignore[no-any-return]

    def place(self, array: Any, where: Any, copy: bool | None) -> Any:
        return _impl().place(array, where, copy)

    def result_text(self, shards: LocalShards, user_mesh: Any) -> str:
        from interop.sharding.model import format_spec

        axes = dict(zip(shards.mesh.names, shards.mesh.shape, strict=True))
        return f"a global jax.Array with NamedSharding(Mesh({axes}), {format_spec(shards.spec)})"

    def build(
        self,
        shards: LocalShards,
        arrays: list[Any],
        where: list[Any],
        copy: bool | None,
        user_mesh: Any,
    ) -> Any:
        # the core put each shard on its device first (`place`, the plan's PlaceShards step)
        devices = self._devices(shards, None) if user_mesh is None else ()
        return _impl().assemble(shards, arrays, devices, user_mesh)


#: the one hook object `JaxAdapter.sharded()` returns
HOOK = JaxSharded()
