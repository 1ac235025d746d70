"""interop-hub: move tensors between deep-learning frameworks through DLPack, zero-copy when
memory can be shared and with an explained copy when it cannot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .adapter import Adapter, Capabilities
from .aligned import aligned_numpy, set_aligned_numpy
from .api import (
    adapters,
    convert,
    convert_tree,
    explain,
    explain_tree,
    immutable_policy,
    inspect,
    register,
    set_immutable_policy,
)
from .errors import (
    AdapterError,
    AlignedNumpyUnavailableError,
    BridgedFunctionError,
    BrokenAdapterError,
    CastError,
    CopyForbiddenError,
    DeviceError,
    DLPackError,
    FrameworkNotInstalledError,
    GradientsUnsupportedError,
    InteropError,
    InvalidArgumentError,
    ObjectStoreError,
    OutSpecError,
    ReadOnlyMemoryError,
    UnknownFrameworkError,
    UnsupportedDTypeError,
    UnsupportedLayoutError,
    UnsupportedTensorError,
    UnsupportedTransformError,
)
from .grad import wrap
from .info import Device, TensorInfo
from .plan import Plan, Step
from .registry import AdapterInfo, ShadowedAdapterWarning, TracingError
from .tree import LeafPlan, TreePlan

if TYPE_CHECKING:
    from .sharding.model import (
        LocalShard,
        LocalShards,
        MeshMismatchError,
        PartialPlacementError,
        RemoteShardError,
        ShardingError,
        UnevenShardsError,
        UnsupportedShardingError,
    )
    from .sharding.plans import ShardedPlan

__version__ = "0.1.0"

__all__ = [
    "Adapter",
    "AdapterError",
    "AlignedNumpyUnavailableError",
    "BridgedFunctionError",
    "AdapterInfo",
    "BrokenAdapterError",
    "Capabilities",
    "CastError",
    "CopyForbiddenError",
    "DLPackError",
    "Device",
    "DeviceError",
    "FrameworkNotInstalledError",
    "GradientsUnsupportedError",
    "InteropError",
    "InvalidArgumentError",
    "ObjectStoreError",
    "OutSpecError",
    "LeafPlan",
    "LocalShard",
    "LocalShards",
    "MeshMismatchError",
    "PartialPlacementError",
    "Plan",
    "ReadOnlyMemoryError",
    "RemoteShardError",
    "ShardedPlan",
    "ShadowedAdapterWarning",
    "ShardingError",
    "Step",
    "TensorInfo",
    "TracingError",
    "TreePlan",
    "UnevenShardsError",
    "UnknownFrameworkError",
    "UnsupportedDTypeError",
    "UnsupportedLayoutError",
    "UnsupportedShardingError",
    "UnsupportedTensorError",
    "UnsupportedTransformError",
    "adapters",
    "aligned_numpy",
    "convert",
    "convert_tree",
    "explain",
    "immutable_policy",
    "explain_tree",
    "inspect",
    "register",
    "set_aligned_numpy",
    "set_immutable_policy",
    "wrap",
]


def __getattr__(name: str) -> Any:
    """The sharded-array types and errors load with `interop.sharding.model` on first use."""
    from . import sharding

    if name in sharding.MODEL_NAMES:
        return getattr(sharding, name)
    raise AttributeError(f"module 'interop' has no attribute {name!r}")
