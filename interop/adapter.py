"""The adapter contract: what a framework plugin declares (as data) and implements (as code).

An adapter module must be cheap to import: it never imports its framework at module level,
only inside methods, and only when one of that framework's tensors is involved.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from . import dlpack as dl
from .info import CANONICAL, CONTIGUOUS, LAYOUTS, Device, TensorInfo

# Export protocols: how the core takes a DLPack capsule from the framework's tensors.
DLPACK = "dlpack"  # tensor.__dlpack__(max_version=...) gives versioned capsules
DLPACK_LEGACY = "dlpack_legacy"  # tensor.__dlpack__() gives legacy capsules only
CAPSULE = "capsule"  # a framework function returns a legacy capsule (export() does it)
C_EXCHANGE_API = "c_exchange_api"  # type(tensor).__dlpack_c_exchange_api__ (DLPack 1.3)
# Import protocols: what the framework's from_dlpack takes.
OBJECT = "object"  # an object whose __dlpack__ is called with max_version (versioned capsules)
OBJECT_LEGACY = "object_legacy"  # an object whose __dlpack__ is called without max_version
CAPSULE_VERSIONED = "capsule_versioned"  # a versioned capsule passed directly

# How imported tensors treat memory they did not allocate.
WRITABLE = "writable"  # results are always writable: read-only memory must be copied
READ_ONLY_FLAG = "read_only_flag"  # results honour DLPack's READ_ONLY flag
IMMUTABLE = "immutable"  # results cannot be written through the framework's API


@dataclass(frozen=True)
class Capabilities:
    """What one framework can do, declared as data so the core plans before touching memory."""

    export_dtypes: frozenset[str]
    import_dtypes: frozenset[str]
    exports: frozenset[str] = frozenset({DLPACK})
    imports: frozenset[str] = frozenset({OBJECT})
    devices: frozenset[str] = frozenset({"cpu"})
    #: layout classes (see interop.info) its importer shares without copying
    import_layouts: frozenset[str] = frozenset(LAYOUTS)
    #: byte alignment its importer needs to share; 1 means none
    import_alignment: int = 1
    #: what its importer does with an unaligned buffer: "copy" (itself) or "refuse"
    unaligned_import: str = "copy"
    #: whether its importer honours DLTensor.byte_offset
    import_byte_offset: bool = True
    import_access: str = WRITABLE
    #: its tensors cannot be written through its API (JAX, TensorFlow)
    immutable: bool = False
    #: its importer marks everything taken from a legacy capsule read-only (NumPy), so
    #: read-only memory may reach it as a legacy capsule
    legacy_import_read_only: bool = False
    #: devices `to_device()` can copy its tensors to (default: `devices`)
    moves_to: frozenset[str] | None = None
    #: devices `from_dlpack_to()` can import from while copying onto its own (CuPy: "cpu")
    moves_from: frozenset[str] = frozenset()
    #: why some dtypes are refused although the importer would not fail on them (it would
    #: take them wrongly): dtype name -> reason, said in the error
    import_gaps: Mapping[str, str] = field(default_factory=dict)
    #: the newest DLPack version it speaks
    dlpack_version: tuple[int, int] = (1, 0)
    #: extra words for `interop list`
    notes: tuple[str, ...] = field(default=())

    def accepts_layout(self, layout: str) -> bool:
        return layout in self.import_layouts

    @cached_property
    def wants_versioned(self) -> bool:
        """Whether its importer can take a versioned capsule (and so learn READ_ONLY)."""
        return bool({OBJECT, CAPSULE_VERSIONED} & self.imports)

    @cached_property
    def cpu_only(self) -> bool:
        return self.devices == frozenset({"cpu"})


COMPACT_ONLY = frozenset({CANONICAL, CONTIGUOUS})


class Adapter:
    """Base class for framework adapters; subclasses set the class attributes and methods.

    Required: `name`, `modules`, `capabilities()`, `from_dlpack()`, `copy()`.
    Optional: `export()` (default: the tensor itself, which has `__dlpack__`), `refusal()`,
    `export_notes()`, `to_device()`, `consumer_stream()`, `sample()`.
    """

    #: the name users pass as `to=` and the entry point's name
    name: ClassVar[str] = ""
    #: other accepted names ("np", "tf", ...)
    aliases: ClassVar[tuple[str, ...]] = ()
    #: top-level modules whose types this adapter owns ("jax", "jaxlib")
    modules: ClassVar[tuple[str, ...]] = ()
    #: distributions that provide the framework, first installed wins ("tensorflow-cpu", ...)
    distributions: ClassVar[tuple[str, ...]] = ()
    #: framework versions this adapter supports: (lowest included, highest excluded), or None
    supported_versions: ClassVar[tuple[str | None, str | None]] = (None, None)

    # --- discovery (never imports the framework) -------------------------------------------
    def installed(self) -> bool:
        """Whether the framework can be imported here (found, not imported)."""
        return any(importlib.util.find_spec(m) is not None for m in self.modules[:1])

    def framework_version(self) -> str | None:
        import importlib.metadata  # ~14 ms: only when versions are asked for

        for dist in self.distributions or self.modules[:1]:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def unavailable(self) -> str | None:
        """Why this framework cannot convert here (not installed, no device), or None."""
        return None if self.installed() else f"{self.name} is not installed"

    def device_unavailable(self, device: Device) -> str | None:
        """Why `device` cannot be used here although declared (no GPU visible), or None."""
        return None

    def imported(self) -> bool:
        """Whether the framework is already imported (so its tensors can exist)."""
        return self.modules[0] in sys.modules

    def tensor_types(self) -> tuple[type, ...]:
        """The framework's tensor types; called only once the framework is imported."""
        raise NotImplementedError

    def owns(self, x: object) -> bool:
        return isinstance(x, self.tensor_types())

    def on_cpu(self, x: Any) -> bool:
        """Whether `x` is in host memory, if that is cheap to tell (no stream to hand over
        then); False means "ask its `__dlpack_device__`"."""
        return False

    # --- what it can do --------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        raise NotImplementedError

    def refusal(self, info: TensorInfo) -> str | None:
        """Why this framework cannot import `info` beyond the declared capabilities, or None."""
        return None

    def export_notes(self, x: Any) -> tuple[str, ...]:
        """Things `explain` must say about exporting this tensor (a detach, a wait)."""
        return ()

    # --- moving memory ---------------------------------------------------------------------
    def export(self, x: Any, *, writable: bool = False) -> Any:
        """A DLPack source for `x`: an object with `__dlpack__`, or a legacy capsule.

        `writable` says the consumer will get write access (frameworks with read and write
        exports, like MXNet, pick the right one).
        """
        return x

    def from_dlpack(self, source: Any) -> Any:
        """Import a DLPack source of a kind declared in `capabilities().imports`."""
        raise NotImplementedError

    def copy(self, x: Any) -> Any:
        """A fresh, compact (row-major), writable copy of one of this framework's tensors."""
        raise NotImplementedError

    def to_device(self, x: Any, device: Device) -> Any:
        """A copy of `x` on `device` (raise DeviceError when the framework cannot)."""
        from .errors import DeviceError

        raise DeviceError(f"{self.name} cannot move tensors to {device}")

    def from_dlpack_to(self, source: Any, device: Device) -> Any:
        """Import a source living on another device by copying it onto `device` (for
        frameworks that cannot hold the source's device at all, declared in `moves_from`)."""
        from .errors import DeviceError

        raise DeviceError(f"{self.name} cannot import tensors from another device")

    def consumer_stream(self, device: Device) -> Any:
        """The stream this framework would read on (for `__dlpack__(stream=...)`), or None."""
        return None

    # --- for the matrix and the conformance kit: the framework's own APIs only -------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        """A deterministic tensor of `dtype` and `shape` (values from interop.samples)."""
        raise NotImplementedError

    def views(self, x: Any) -> dict[str, Any]:
        """Views of a 2-D or larger `x` in other layouts, by name: "transposed", "step-sliced",
        "offset", "negative". Frameworks without strided views return {}."""
        return {}

    def to_bytes(self, x: Any) -> bytes:
        """The elements of `x` in row-major order as raw bytes: the bit-for-bit oracle."""
        raise NotImplementedError

    def data_address(self, x: Any) -> int:
        """Address of the first element, read through the framework's own API."""
        raise NotImplementedError

    def mutate(self, x: Any) -> bool:
        """Set the first element of `x` to one, in place; False if the framework cannot."""
        return False

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        """Run two of the framework's own kernels on `x` and return `(doubled, total)`.

        `doubled` is the framework's own `x + x` (for bool dtype: the framework's logical not
        of `x`), same shape and dtype as `x`; `total` is the framework's own sum-reduction of
        all elements of `x` as a 0-d tensor of the framework (for bool: the number of True
        elements, an integer). Return None for a dtype the framework has no such kernels for.

        The kit uses every result with these: a tensor that reads back fine can still abort
        the first kernel that touches it (TensorFlow on an unaligned buffer).
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def dlpack_versions(caps: Capabilities) -> str:
    """The DLPack versions a framework speaks, for people."""
    legacy = {DLPACK_LEGACY, CAPSULE, OBJECT_LEGACY} & (caps.exports | caps.imports)
    versioned = {DLPACK, OBJECT, CAPSULE_VERSIONED} & (caps.exports | caps.imports)
    parts = []
    if legacy or not versioned:
        parts.append("legacy")
    if versioned:
        parts.append("{}.{}".format(*caps.dlpack_version))
    if C_EXCHANGE_API in caps.exports | caps.imports:
        parts.append("C exchange API")
    return ", ".join(parts)


ALL_DTYPES = frozenset(dl.DTYPE_CODES)
