"""The adapter contract, version 1.1: what a framework plugin declares (as data) and implements
(as code), and what the core hands it.

This module is the contract's one source of truth; `docs/plugins.md` explains it for plugin
authors (and its worked example runs through the conformance kit in the test suite).

- `Capabilities`: the declaration. Every value is checked when it is made, so a typo fails
  the plugin's registration with a message naming the field, instead of silently changing a
  plan.
- `Adapter`: the base class. Each hook below says whether it is required, and who calls it
  (the core while converting, `interop list`, or the conformance kit).
- `ExchangeObject`: what `from_dlpack` receives when the adapter imports objects.
- `ShardedArrays` (contract 1.1, optional): what `Adapter.sharded()` returns to bring sharded
  conversion (`interop.sharding`) for the framework's distributed arrays.
- `Adapter.grad_source()`, `Adapter.grad_target()` (contract 1.1, optional): the framework's
  `interop.grad.Source` and `Target`, to bring gradients across frameworks (`interop.wrap`).
- `Adapter.tree_node()` (contract 1.1, optional): a `TreeNodes` function taking apart the
  containers the framework's pytree registry knows, for `interop.convert_tree`.
- `CONTRACT_VERSION`: an adapter sets `contract` to the version it was written for; the registry
  reports an adapter written for another major version, or a newer minor one, as
  `incompatible contract` and never uses it. An older minor one loads: it lacks only hooks
  that are optional (a 1.0 adapter has no `sharded()` or `grad_source()` of its own).

An adapter module must be cheap to import: it never imports its framework at module level,
only inside methods, and only when one of that framework's tensors is involved.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from . import dlpack as dl
from .errors import AdapterError, UnsupportedDTypeError, typed
from .info import CANONICAL, CONTIGUOUS, LAYOUTS, Device, TensorInfo

if TYPE_CHECKING:
    from .sharding.model import LocalShards
    from .step import Step

#: The contract this core implements: (major, minor). Minor versions only add optional hooks
#: and optional `Capabilities` fields; a new major version may change anything.
CONTRACT_VERSION: tuple[int, int] = (1, 1)


class _Declared(str, Enum):
    """A declared value: an enum that compares, hashes and prints as its plain string, so the
    string constants of earlier contracts ("dlpack", "writable", ...) keep working."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ExportProtocol(_Declared):
    """How the core takes a DLPack capsule from the framework's tensors (`exports`)."""

    DLPACK = "dlpack"  # export(x).__dlpack__(max_version=...) gives versioned capsules
    DLPACK_LEGACY = "dlpack_legacy"  # export(x).__dlpack__() gives legacy capsules only
    CAPSULE = "capsule"  # export(x) returns a capsule itself (a framework's to_dlpack)
    #: type(x).__dlpack_c_exchange_api__, a PyCapsule "dlpack_exchange_api" (DLPack >= 1.3);
    #: the core may export through it instead of the Python protocol
    C_EXCHANGE_API = "c_exchange_api"


class ImportProtocol(_Declared):
    """What the adapter's `from_dlpack` takes (`imports`)."""

    OBJECT = "object"  # an ExchangeObject; your importer calls __dlpack__(max_version=...)
    OBJECT_LEGACY = "object_legacy"  # an ExchangeObject; your importer calls __dlpack__()
    CAPSULE = "capsule"  # a legacy capsule, passed directly
    CAPSULE_VERSIONED = "capsule_versioned"  # a versioned capsule, passed directly


class Access(_Declared):
    """How imported tensors treat memory the framework did not allocate (`import_access`)."""

    WRITABLE = "writable"  # results are always writable: read-only memory must be copied
    READ_ONLY_FLAG = "read_only_flag"  # results honour DLPack's READ_ONLY flag
    IMMUTABLE = "immutable"  # results cannot be written through the framework's API


class Unaligned(_Declared):
    """What the importer does with a buffer below `import_alignment` (`unaligned_import`)."""

    COPY = "copy"  # it copies the buffer itself
    REFUSE = "refuse"  # it fails: the core copies at the source first


# The same values under the names adapters import (contract 0 had only these strings).
DLPACK = ExportProtocol.DLPACK
DLPACK_LEGACY = ExportProtocol.DLPACK_LEGACY
CAPSULE = ExportProtocol.CAPSULE  # equal to ImportProtocol.CAPSULE: usable in both sets
C_EXCHANGE_API = ExportProtocol.C_EXCHANGE_API
OBJECT = ImportProtocol.OBJECT
OBJECT_LEGACY = ImportProtocol.OBJECT_LEGACY
CAPSULE_VERSIONED = ImportProtocol.CAPSULE_VERSIONED
WRITABLE = Access.WRITABLE
READ_ONLY_FLAG = Access.READ_ONLY_FLAG
IMMUTABLE = Access.IMMUTABLE

ALL_DTYPES = frozenset(dl.DTYPE_CODES)
DEVICES = frozenset(dl.DEVICE_CODES)


class Gaps(Mapping[str, str]):
    """`import_gaps` or `dtype_notes` as a read-only, hashable mapping (so equal declarations
    are equal values)."""

    __slots__ = ("_reasons",)

    def __init__(self, reasons: Mapping[str, str]) -> None:
        self._reasons = dict(reasons)

    def __getitem__(self, dtype: str) -> str:
        return self._reasons[dtype]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons)

    def __len__(self) -> int:
        return len(self._reasons)

    def __hash__(self) -> int:
        return hash(frozenset(self._reasons.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._reasons == dict(other)

    def __repr__(self) -> str:
        return f"Gaps({self._reasons!r})"


def _invalid(field_name: str, problem: str) -> AdapterError:
    return AdapterError(f"Capabilities.{field_name}: {problem}")


def _names(field_name: str, value: Any, allowed: Iterable[str], what: str) -> frozenset[str]:
    """`value` as a frozenset of known names, or an error naming the field and the culprit."""
    try:
        if isinstance(value, str):
            raise TypeError
        values = frozenset(value)
    except TypeError:
        raise _invalid(field_name, f"expected a set of {what}, got {value!r}") from None
    known = frozenset(allowed)
    unknown = sorted(repr(v) for v in values if not isinstance(v, str) or v not in known)
    if unknown:
        raise _invalid(
            field_name,
            f"unknown {what} {', '.join(unknown)}; known: {', '.join(sorted(map(str, known)))}",
        )
    return values


def _reasons(field_name: str, value: Any, imported: frozenset[str], must_import: bool) -> Gaps:
    """`value` as a dtype -> reason mapping whose dtypes are known and, as `must_import` says,
    all imported or none; else an error naming the field and the culprit."""
    if not isinstance(value, Mapping):
        raise _invalid(field_name, f"expected a dtype -> reason mapping, got {value!r}")
    _names(field_name, value.keys(), ALL_DTYPES, "dtype")
    for dtype, why in value.items():
        if not isinstance(why, str) or not why:
            raise _invalid(field_name, f"{dtype!r} needs a reason (a non-empty string)")
        if (dtype in imported) != must_import:
            where = "not in" if must_import else "also in"
            raise _invalid(field_name, f"{dtype!r} is {where} import_dtypes")
    return Gaps(value)


def _members(field_name: str, value: Any, kind: type[_Declared]) -> frozenset[Any]:
    names = _names(field_name, value, [m.value for m in kind], kind.__name__)
    return frozenset(kind(v) for v in names)


def _member(field_name: str, value: Any, kind: type[_Declared]) -> Any:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(repr(m.value) for m in kind)
        raise _invalid(field_name, f"{value!r} is not one of {known}") from None


def _flag(field_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _invalid(field_name, f"expected True or False, got {value!r}")
    return value


@dataclass(frozen=True)
class Capabilities:
    """What one framework can do, declared as data so the core plans before touching memory.

    Values are checked (and sets normalised to frozensets of the enums above) when the object
    is made: a wrong one raises `AdapterError` naming the field, so the plugin is reported as
    broken at registration instead of planning wrongly.
    """

    #: DLPack dtype names (interop.dlpack.DTYPE_CODES) its tensors export
    export_dtypes: frozenset[str]
    #: DLPack dtype names its importer takes faithfully (a missing one is refused up front)
    import_dtypes: frozenset[str]
    #: how the core takes a capsule from its tensors (`ExportProtocol` values)
    exports: frozenset[str] = frozenset({DLPACK})
    #: what its `from_dlpack` takes (`ImportProtocol` values)
    imports: frozenset[str] = frozenset({OBJECT})
    #: DLPack device names ("cpu", "cuda", ...) its tensors live on
    devices: frozenset[str] = frozenset({"cpu"})
    #: layout classes (see interop.info) its importer shares without copying
    import_layouts: frozenset[str] = frozenset(LAYOUTS)
    #: byte alignment its importer needs to share; 1 means none
    import_alignment: int = 1
    #: what its importer does with an unaligned buffer: "copy" (itself) or "refuse"
    unaligned_import: str = Unaligned.COPY
    #: the same two rules where another device's differ: ((device, alignment, unaligned), ...)
    #: (JAX copies unaligned host buffers, but shares GPU ones below XLA's 16 bytes, whose
    #: kernels then fail)
    alignment_by_device: tuple[tuple[str, int, str], ...] = ()
    #: whether its importer honours DLTensor.byte_offset
    import_byte_offset: bool = True
    #: how its imports treat memory it did not allocate (an `Access` value)
    import_access: str = WRITABLE
    #: its tensors cannot be written through its API (JAX, TensorFlow)
    immutable: bool = False
    #: its importer marks everything taken from a legacy capsule read-only (NumPy), so
    #: read-only memory may reach it as a legacy capsule
    legacy_import_read_only: bool = False
    #: with `legacy_import_read_only`: its adapter's `make_writable` gives such a result write
    #: access, so writable memory reaches it as a legacy capsule too (instead of bridged
    #: into a versioned one: 2-3 us in Python) and is made writable on arrival
    writable_legacy_import: bool = False
    #: devices `to_device()` can copy its tensors to (default: `devices`)
    moves_to: frozenset[str] | None = None
    #: devices `from_dlpack_to()` can import from while copying onto its own (CuPy: "cpu")
    moves_from: frozenset[str] = frozenset()
    #: devices whose memory its importer always copies instead of sharing (MLX: "cpu"); the
    #: core then never promises zero-copy there and `copy=False` raises
    import_copies: frozenset[str] = frozenset()
    #: why some dtypes are refused although the importer would not fail on them (it would
    #: take them wrongly): dtype name -> reason, said in the error
    import_gaps: Mapping[str, str] = field(default_factory=lambda: Gaps({}))
    #: dtypes it imports faithfully but has few kernels for (Paddle's uint16: not even a
    #: copy): dtype -> what `explain` tells of a result in it, so nobody learns it at the
    #: first op
    dtype_notes: Mapping[str, str] = field(default_factory=lambda: Gaps({}))
    #: the newest DLPack version it speaks
    dlpack_version: tuple[int, int] = (1, 0)
    #: extra words for `interop list`
    notes: tuple[str, ...] = field(default=())
    #: its importer misbehaves on a capsule whose deleter is NULL (JAX aborts when it frees
    #: the array): the core re-wraps such capsules first
    import_needs_deleter: bool = False
    #: its importer calls the deleter only when manager_ctx is set (Paddle): likewise
    import_needs_manager_ctx: bool = False
    #: the core may copy its CPU tensors through a NumPy view of their DLPack memory, which is
    #: faster than the framework's own copy (False: its own copy is as fast, as TF's DeepCopy)
    copy_through_numpy: bool = True
    #: dtypes whose import depends on process state that can change (JAX's x64 switch): the
    #: fast path never takes them, so every such conversion is planned afresh
    volatile_dtypes: frozenset[str] = frozenset()
    #: it frees an imported tensor while holding a lock that the deleters of its own exports
    #: take again (Paddle 3.3): memory it exported that comes back to it through another
    #: framework would deadlock when freed, so the core releases every import into it just
    #: after, outside that lock
    frees_under_lock: bool = False
    #: it files each import's release under the tensor's data address, one per address
    #: (Paddle 3.3): a second import of an address it holds drops the first's release (a
    #: leak), so the core copies such a tensor instead. Needs `frees_under_lock`, whose
    #: re-wrap tells the core when an import is released
    one_import_per_address: bool = False
    #: builtin exception types its framework's own import raises for a tensor it cannot take
    #: (a dtype it has no type for: MLX ValueError, torch BufferError, Paddle
    #: NotImplementedError): the core's refusals into it are instances of these too, so an
    #: `except` written for the framework keeps catching them
    import_errors: tuple[type[Exception], ...] = ()
    #: the fewest dimensions a tensor of its own may have (MXNet's legacy NDArray: 1, its
    #: kernels take shape () for "unknown") and the most (Paddle: 9; None: no limit): the
    #: core refuses others before its importer or its first kernel fails on them
    min_ndim: int = 0
    max_ndim: int | None = None

    def __hash__(self) -> int:  # plans are cached by capabilities' value: hash them once
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __post_init__(self) -> None:
        """Check every field (an adapter's mistake is an error naming the field) and keep
        the checked, normalised values."""
        checked = self._checked_fields()
        self._check_relations(checked)
        checked["alignment_by_device"] = self._checked_alignment(checked["devices"])
        imported = checked["import_dtypes"]
        checked["import_gaps"] = _reasons("import_gaps", self.import_gaps, imported, False)
        checked["dtype_notes"] = _reasons("dtype_notes", self.dtype_notes, imported, True)
        self._check_bounds()
        checked["notes"] = tuple(self.notes)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def _checked_fields(self) -> dict[str, Any]:
        """Each field on its own: names, members and flags."""
        return {
            "export_dtypes": _names("export_dtypes", self.export_dtypes, ALL_DTYPES, "dtype"),
            "import_dtypes": _names("import_dtypes", self.import_dtypes, ALL_DTYPES, "dtype"),
            "exports": _members("exports", self.exports, ExportProtocol),
            "imports": _members("imports", self.imports, ImportProtocol),
            "devices": _names("devices", self.devices, DEVICES, "device"),
            "import_layouts": _names("import_layouts", self.import_layouts, LAYOUTS, "layout"),
            "unaligned_import": _member("unaligned_import", self.unaligned_import, Unaligned),
            "import_access": _member("import_access", self.import_access, Access),
            "import_byte_offset": _flag("import_byte_offset", self.import_byte_offset),
            "immutable": _flag("immutable", self.immutable),
            "legacy_import_read_only": _flag(
                "legacy_import_read_only", self.legacy_import_read_only
            ),
            "writable_legacy_import": _flag("writable_legacy_import", self.writable_legacy_import),
            "moves_from": _names("moves_from", self.moves_from, DEVICES, "device"),
            "import_copies": _names("import_copies", self.import_copies, DEVICES, "device"),
            "import_needs_deleter": _flag("import_needs_deleter", self.import_needs_deleter),
            "import_needs_manager_ctx": _flag(
                "import_needs_manager_ctx", self.import_needs_manager_ctx
            ),
            "copy_through_numpy": _flag("copy_through_numpy", self.copy_through_numpy),
            "frees_under_lock": _flag("frees_under_lock", self.frees_under_lock),
            "one_import_per_address": _flag("one_import_per_address", self.one_import_per_address),
            "volatile_dtypes": _names("volatile_dtypes", self.volatile_dtypes, ALL_DTYPES, "dtype"),
        }

    def _check_relations(self, checked: dict[str, Any]) -> None:
        """Fields that need one another (checked: `_checked_fields`' values)."""
        if not checked["devices"]:
            raise _invalid("devices", "declare at least one device")
        if self.one_import_per_address and not self.frees_under_lock:
            raise _invalid(
                "one_import_per_address",
                "needs frees_under_lock (the re-wrap it asks for tells when an import is released)",
            )
        if self.writable_legacy_import and not self.legacy_import_read_only:
            raise _invalid(
                "writable_legacy_import",
                "needs legacy_import_read_only (an importer that keeps legacy imports writable "
                "needs no help)",
            )
        if self.moves_to is not None:
            checked["moves_to"] = _names("moves_to", self.moves_to, DEVICES, "device")
        stray = checked["import_copies"] - checked["devices"]
        if stray:
            raise _invalid("import_copies", f"{sorted(stray)} are not in devices")

    def _checked_alignment(self, devices: frozenset[str]) -> tuple[tuple[str, int, str], ...]:
        """`import_alignment` and `alignment_by_device`, checked; the latter normalised."""
        rules = self.alignment_by_device
        if not isinstance(rules, tuple) or not all(
            isinstance(r, tuple) and len(r) == 3 for r in rules
        ):
            raise _invalid("alignment_by_device", "expected (device, alignment, unaligned) tuples")
        for name, alignment in (
            ("import_alignment", self.import_alignment),
            *(("alignment_by_device", rule[1]) for rule in rules),
        ):
            if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1):
                raise _invalid(name, f"expected a power of two >= 1, got {alignment!r}")
        ruled = _names("alignment_by_device", {r[0] for r in rules}, DEVICES, "device")
        if ruled - devices:
            raise _invalid("alignment_by_device", f"{sorted(ruled - devices)} are not in devices")
        return tuple(
            (device, alignment, _member("alignment_by_device", unaligned, Unaligned))
            for device, alignment, unaligned in rules
        )

    def _check_bounds(self) -> None:
        """The DLPack version, the dimension bounds, the import errors and the notes."""
        version = self.dlpack_version
        if (
            not isinstance(version, tuple)
            or len(version) != 2
            or not all(type(part) is int and part >= 0 for part in version)
            or version > dl.MAX_VERSION
        ):
            newest = "{}.{}".format(*dl.MAX_VERSION)
            raise _invalid(
                "dlpack_version", f"expected (major, minor) up to {newest}, got {version!r}"
            )
        low, high = self.min_ndim, self.max_ndim
        if type(low) is not int or low < 0:
            raise _invalid("min_ndim", f"expected an int >= 0, got {low!r}")
        if high is not None and (type(high) is not int or high < max(low, 1)):
            raise _invalid("max_ndim", f"expected None or an int >= max(min_ndim, 1), got {high!r}")
        errors = self.import_errors
        try:
            if not isinstance(errors, tuple):
                raise TypeError
            typed(UnsupportedDTypeError, *errors)
        except TypeError:
            raise _invalid(
                "import_errors",
                f"expected a tuple of builtin exception types (ValueError, ...), got {errors!r}",
            ) from None
        if isinstance(self.notes, str) or not all(isinstance(n, str) for n in self.notes):
            raise _invalid("notes", f"expected a tuple of strings, got {self.notes!r}")

    def alignment_on(self, device_type: str) -> tuple[int, str]:
        """(alignment its importer needs to share, what it does below it) on `device_type`."""
        for device, alignment, unaligned in self.alignment_by_device:
            if device == device_type:
                return alignment, unaligned
        return self.import_alignment, self.unaligned_import

    def ndim_refusal(self, ndim: int) -> str | None:
        """Why a tensor of `ndim` dimensions cannot become one of its tensors, or None."""
        if ndim < self.min_ndim:
            return (
                f"its tensors have at least {self.min_ndim} dimension(s), and this one has "
                f"{ndim}: its kernels would fail on it"
            )
        if self.max_ndim is not None and ndim > self.max_ndim:
            return f"its tensors have at most {self.max_ndim} dimensions, and this one has {ndim}"
        return None

    def accepts_layout(self, layout: str) -> bool:
        return layout in self.import_layouts

    @cached_property
    def wants_versioned(self) -> bool:
        """Whether its importer can take a versioned capsule (and so learn READ_ONLY)."""
        return bool({OBJECT, CAPSULE_VERSIONED} & self.imports)

    @cached_property
    def cpu_only(self) -> bool:
        return self.devices == frozenset({"cpu"})

    @cached_property
    def writes(self) -> bool:
        """Whether its results may be written: always (WRITABLE), or unless the capsule says
        READ_ONLY (READ_ONLY_FLAG: writable memory reaches it so that they are writable, where
        it takes versioned capsules or writes legacy ones). A source with read and write
        exports (MXNet) must then export for writing."""
        if self.import_access == READ_ONLY_FLAG:
            return self.wants_versioned or not self.legacy_import_read_only
        return self.import_access == WRITABLE


COMPACT_ONLY = frozenset({CANONICAL, CONTIGUOUS})


@runtime_checkable
class ExchangeObject(Protocol):
    """What `Adapter.from_dlpack` (and `from_dlpack_to`) receive when `imports` holds `object`
    or `object_legacy`: one DLPack tensor the core holds, handed over exactly once.

    Pass it to your framework's `from_dlpack` as any producer; it answers `__dlpack__` with the
    capsule kind asked for (bridging legacy and versioned capsules, READ_ONLY never dropped).
    Adapters may also read `info` and use the other methods, for frameworks whose importer
    needs help; after `take`/`take_as` the memory is yours to release (by consuming the
    capsule, or dropping it: its destructor calls the producer's deleter).
    """

    #: the tensor's description (shape, strides, dtype, device, read_only, version, ...),
    #: read without consuming it
    info: TensorInfo

    @property
    def versioned(self) -> bool:
        """Whether the held capsule is versioned (DLPack >= 1.0)."""
        ...

    def take(self) -> Any:
        """The held capsule as it is; the object is empty afterwards."""
        ...

    def take_as(
        self,
        versioned: bool,
        *,
        read_only: bool = False,
        legacy_read_only_ok: bool = False,
        version: tuple[int, int] = dl.MAX_VERSION,
    ) -> Any:
        """The held capsule in the kind asked for (bridged if needed; READ_ONLY set when
        `read_only`, and a read-only tensor made legacy only with `legacy_read_only_ok`)."""
        ...

    def retag(self, dtype: str) -> None:
        """Relabel the held tensor's dtype in place (same element size): for frameworks whose
        DLPack code path cannot name a dtype they hold (NumPy's ml_dtypes)."""
        ...

    def release(self) -> None:
        """Drop the held capsule unconsumed (the producer's memory is freed by its deleter)."""
        ...

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """The Python DLPack protocol: a versioned capsule when `max_version` allows one."""
        ...

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device code, device ordinal)."""
        ...


#: `ShardedArrays` members a hook may lack (the core does without them), and the first names
#: of renamed ones, still asked of hooks written before the rename
SHARDED_OPTIONAL = frozenset({"place"})
SHARDED_FORMER_NAMES = {"result_text": "describe"}


@runtime_checkable
class ShardedArrays(Protocol):
    """What `Adapter.sharded()` returns to bring sharded conversion for its framework
    (contract 1.1): the core's `interop.sharding` reads a source's local shards into the
    neutral model (`interop.sharding.model`: `LocalShards`, `MeshLayout`, a PartitionSpec-like
    `spec`), converts each shard through the per-tensor path, and asks the target's hook to
    rebuild its distributed array around them. The core never imports a framework for this:
    every method is called only once the framework is imported (one of its arrays exists).
    Errors are `interop.ShardingError`s (`MeshMismatchError`, ...) naming what to do next.
    """

    #: how plans name a source of this kind ("torch (DTensor)")
    label: str
    #: the framework's mesh type, for people ("DeviceMesh"): `device=` may name one
    mesh_name: str

    # --- as a source ------------------------------------------------------------------------
    def is_array_type(self, kind: type) -> bool:
        """Whether instances of `kind` (a type the adapter `owns`) may be distributed arrays;
        asked once per type, and the answer is remembered."""
        ...

    def is_sharded(self, x: Any, mesh_asked: bool) -> bool:
        """Whether `x` (of such a type) is spread over several devices, so converts shard by
        shard; `mesh_asked`: `device=` is another framework's mesh (a one-device array
        becomes a one-device distributed array then)."""
        ...

    def partial(self, x: Any) -> str:
        """ "" when `x` holds no pending sums; else what reducing them does, as a plan note."""
        ...

    def refuse_partial(self, x: Any, target: str | None = None) -> Exception:
        """The `PartialPlacementError` for `x` on its way to `target` (None: its own local
        shards), raised when no reduction was asked for."""
        ...

    def reduce_partial(self, x: Any) -> Any:
        """`x` with its pending sums reduced by the framework's own collective."""
        ...

    def read(self, x: Any, partial_as_reduced: bool = False) -> LocalShards:
        """This process's shards of `x`, shared (never copied), with their global indices,
        mesh devices and the placements as a spec. `partial_as_reduced`: describe `x` as it
        will be once reduced (for `explain`)."""
        ...

    def mesh_of(self, x: Any) -> Any:
        """The framework's own mesh of `x` (converting into the same framework keeps it)."""
        ...

    def export_shard(self, data: Any) -> tuple[Any, Step | None]:
        """A shard as the per-tensor path should take it into another framework, and the
        step that says what was done to it (None: the shard itself)."""
        ...

    def processes(self) -> tuple[int, int] | str:
        """(this process's index, the process count) in the framework's distributed runtime,
        which number the shards it reads; or a sentence saying why there is none here."""
        ...

    # --- as a target --------------------------------------------------------------------------
    def is_mesh(self, device: Any) -> bool:
        """Whether `device` is one of the framework's meshes."""
        ...

    def context(
        self, shards: LocalShards, origin: tuple[int, int] | None, user_mesh: Any
    ) -> str | None:
        """Why the framework cannot hold `shards` as one distributed array in this process
        (the result is then `LocalShards`), or None; raises when the meshes cannot match.
        `origin`: (index, count) of this process in the runtime of the framework that
        numbered the shards' processes, None when that is this framework."""
        ...

    def fit(self, shards: LocalShards, user_mesh: Any) -> LocalShards:
        """`shards` as they will be rebuilt over `user_mesh` (a mesh of this framework, or
        None): the mesh axes named as it names them, say."""
        ...

    def locate(self, shards: LocalShards, user_mesh: Any) -> list[Any]:
        """Where each local shard goes in the rebuilt array (the framework's devices, one per
        shard, or []); refuses shards this process cannot hold."""
        ...

    def place_step(self, data: Any, where: Any, copy: bool | None) -> Step | None:
        """What putting converted shard `data` (still the source's) at `where` (from
        `locate`) costs, for `explain` (None: nothing)."""
        ...

    def place(self, array: Any, where: Any, copy: bool | None) -> Any:
        """Converted shard `array` (the framework's tensor) put at `where` (from `locate`), as
        `place_step` says; `build` then gets the placed shards. Optional: a hook without it
        places in `build` (contract 1.1 as first written). Called for every shard whenever
        `locate` gave devices, so it returns a shard already there as it is."""
        ...

    def result_text(self, shards: LocalShards, user_mesh: Any) -> str:
        """The distributed array `build` makes, in words, for `explain` (a hook written
        before this name calls it `describe`, which is still asked)."""
        ...

    def build(
        self,
        shards: LocalShards,
        arrays: list[Any],
        where: list[Any],
        copy: bool | None,
        user_mesh: Any,
    ) -> Any:
        """The distributed array over the shards' mesh (or `user_mesh`) whose local shards are
        `arrays` (the framework's tensors, converted, one per shard), without moving data."""
        ...


#: one level of a container: (a path fragment per child, such as "['w']" or ".bias"; the
#: children; a function building the container again from new children, in that order)
TreeNode = tuple[list[str], list[Any], Callable[[list[Any]], Any]]
#: what `Adapter.tree_node()` returns: `x`'s `TreeNode`, or None when `x` is not a container
#: the framework's registry knows (a leaf, as far as this framework is concerned)
TreeNodes = Callable[[Any], TreeNode | None]


class Adapter:
    """Base class for framework adapters: a subclass sets the class attributes and overrides
    the hooks. Required: `name`, `modules`, `contract`, `tensor_types()` (or `owns()`),
    `capabilities()`, `from_dlpack()`, `copy()`; for the conformance kit also `sample()`,
    `to_bytes()`, `data_address()`, `exercise()`. Every other hook has a default that is right
    for a CPU framework without quirks. The table in docs/plugins.md lists them all, with who
    calls them.
    """

    #: required: the name users pass as `to=` and the entry point's name
    name: ClassVar[str] = ""
    #: other accepted names ("np", "tf", ...)
    aliases: ClassVar[tuple[str, ...]] = ()
    #: required: top-level modules whose types this adapter owns ("jax", "jaxlib"); the first
    #: is the one whose presence means the framework is installed and imported
    modules: ClassVar[tuple[str, ...]] = ()
    #: distributions that provide the framework, first installed wins ("tensorflow-cpu", ...)
    distributions: ClassVar[tuple[str, ...]] = ()
    #: framework versions this adapter supports: (lowest included, highest excluded). None
    #: (the default) reads them from the adapter distribution's own requirements on the
    #: framework (`Requires-Dist`, extras included), so they are written once, in pyproject.toml
    supported_versions: ClassVar[tuple[str | None, str | None] | None] = None
    #: required: the contract version (major, minor) the adapter was written for
    contract: ClassVar[tuple[int, int] | None] = None

    # --- discovery (never imports the framework) -------------------------------------------
    def installed(self) -> bool:
        """Whether the framework can be imported here (found, not imported); a finder that
        refuses it (raising ImportError, as import blockers do) means it cannot."""
        try:
            return any(importlib.util.find_spec(m) is not None for m in self.modules[:1])
        except ImportError:
            return False

    def framework_distribution(self) -> tuple[str, str] | None:
        """(distribution, version) of the installed framework, or None."""
        import importlib.metadata  # ~14 ms: only when versions are asked for

        for dist in self.distributions or self.modules[:1]:
            try:
                return dist, importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def framework_version(self) -> str | None:
        found = self.framework_distribution()
        return found[1] if found else None

    def unavailable(self) -> str | None:
        """Why this framework cannot convert here (not installed, no device), or None."""
        if self.installed():
            return None
        wheel = self.distributions[0] if self.distributions else self.modules[0]
        return f"{self.name} is not installed (pip install {wheel}, or the build for your device)"

    def device_unavailable(self, device: Device) -> str | None:
        """Why `device` cannot be used here although declared (no GPU visible), or None."""
        if device.type == "cpu" and device.id != 0:
            return f"{self.name} has one CPU device, cpu:0"
        return None

    def imported(self) -> bool:
        """Whether the framework is already imported (so its tensors can exist)."""
        return self.modules[0] in sys.modules

    def import_framework(self) -> Any:
        """Import the framework (if the program has not) and return its module: what the core
        calls where it must make the framework's types exist (`interop.ray.install("mxnet")`).
        Override it where a plain `import` needs help (MXNet under NumPy 2, Paddle after
        TensorFlow)."""
        return sys.modules.get(self.modules[0]) or importlib.import_module(self.modules[0])

    def tracer(self) -> str | None:
        """The name of this framework's tracer if it is tracing the running code
        ("torch.compile"), else None. While one is, the registry loads no adapter: adapters
        probe their framework when loaded, and a traced probe measures the tracer."""
        return None

    def tensor_types(self) -> tuple[type, ...]:
        """The framework's tensor types; called only once the framework is imported."""
        raise NotImplementedError

    def owns(self, x: object) -> bool:
        return isinstance(x, self.tensor_types())

    #: how users write this framework's devices, for the error a `device=` the core cannot
    #: read gets (e.g. "torch.device('cuda', 0)")
    device_examples: ClassVar[tuple[str, ...]] = ()

    def parse_device(self, device: Any) -> Device | None:
        """The DLPack Device one of this framework's own device objects or spellings names
        (`torch.device("cuda", 1)` -> Device("cuda", 1)), or None when `device` is not one of
        them. Optional: `device=` then takes the core's spellings only. The core asks only
        adapters whose framework is imported, so this may use it but must not import anything;
        raise DeviceError for one of its own that has no DLPack device (a TPU)."""
        return None

    def on_cpu(self, x: Any) -> bool:
        """Whether `x` is in host memory, if that is cheap to tell (no stream to hand over
        then); False means "ask its `__dlpack_device__`"."""
        return False

    # --- what it can do --------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """The declaration; the same object for the same state (plans are cached by it).
        Must not import the framework if the program has not."""
        raise NotImplementedError

    def refusal(self, facts: Any) -> str | None:
        """Why this framework cannot import a tensor with `facts` (`.dtype`, `.device`, ...;
        see interop.plan.Facts) beyond the declared capabilities, or None. Plans are cached:
        the answer may depend only on the facts and on state `capabilities()` reflects."""
        return None

    def ndim_refusal(self, ndim: int) -> str | None:
        """Why a tensor of `ndim` dimensions cannot become one of its tensors now, or None:
        the declared bounds (`Capabilities.min_ndim`, `max_ndim`), unless a mode of the
        framework widens them (MXNet's NumPy semantics hold 0-d arrays). Asked on every
        planned call, beside the plan: routes send tensors outside the declared bounds there."""
        return self.capabilities().ndim_refusal(ndim)

    def export_notes(self, x: Any) -> tuple[str, ...]:
        """Things `explain` must say about exporting this tensor (a detach, a wait)."""
        return ()

    def export_hazard(self, x: Any) -> str:
        """Why `x` cannot be exported as it is, so it must be copied first ("" if it can):
        torch's lazy neg/conj views, whose DLPack export would lose the sign."""
        return ""

    def alias_hazard(self, x: Any) -> str:
        """Why a writable alias of `x` would be unsafe beyond its being immutable ("" if
        none): TensorFlow hands out one buffer for all equal scalar constants."""
        return ""

    # --- the fast path (optional: without these, every conversion takes the full path) -----
    #: (name, allowed values) pairs: a zero-argument method or attribute of a tensor whose
    #: value must be in the set for the compiled fast path to export it directly (torch:
    #: is_neg() must be False) - what `export_hazard` and `export` check. A third item, a
    #: DLPack dtype code, asks only tensors of that code, after the export (torch: is_conj()
    #: of complex tensors, the only ones that carry the bit)
    route_guards: ClassVar[tuple[tuple[Any, ...], ...]] = ()

    def fingerprint(self, x: Any) -> Hashable | None:
        """A cheap key from `x`'s own attributes such that equal keys mean equal DLPack facts
        (dtype, device, layout class, read-only, emptiness, hazards) of the export `exporter`
        makes, except the data address; None when that cannot be told cheaply, and for a
        tensor with elements but no data (a NULL address, which the plan refuses). The
        pure-Python fast path shares a tensor without reading its capsule when its key was
        seen before."""
        return None

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Callable[[Any], Any] | None:
        """A function giving the capsule (of that kind) the full path would take from a tensor
        of `dtype` whose `fingerprint` is not None; or None: no fast path from here. Return
        the same object for the same arguments (the compiled path compares them)."""
        return None

    def bare_exporter(
        self, versioned: bool, writable: bool, dtype: str
    ) -> Callable[[Any], Any] | None:
        """`exporter`'s twin whose capsules have no destructor, for a framework whose capsule
        destructor is Python code that runs after every conversion, taken or not (MXNet's
        ctypes callback: 0.6-1.2 us). Pure-Python routes that hand the capsule straight to
        the importer use it and release what the importer did not take; None: `exporter`."""
        return None

    def fast_address(self, x: Any) -> int:
        """The address of `x`'s first element, where the framework gives it cheaply (a pointer
        attribute): the pure-Python fast path then checks a target's alignment without reading
        the capsule. Override only if it is cheap; the default says it is not."""
        raise NotImplementedError

    def importer(self, as_object: bool, dtype: str) -> Callable[[Any], Any] | None:
        """A function importing a capsule of `dtype` as the full path's `from_dlpack` would
        (`as_object`: it gets an object whose `__dlpack__` returns the capsule); or None."""
        return None

    def import_guard(self) -> Callable[[], Any] | None:
        """A call the fast path makes before it imports through the framework's C exchange API
        (`__dlpack_c_exchange_api__`) instead of `importer`: falsy sends the conversion to the
        full path, whose `from_dlpack` makes something else in the framework's present mode
        (Paddle's static graph mode: a DenseTensor). None: the exchange import always makes
        what `from_dlpack` would."""
        return None

    # --- moving memory ---------------------------------------------------------------------
    def export(self, x: Any, *, writable: bool = False) -> Any:
        """A DLPack source for `x`: an object with `__dlpack__`, or a capsule.

        `writable` says the consumer will get write access (frameworks with read and write
        exports, like MXNet, pick the right one).
        """
        return x

    def from_dlpack(self, source: Any) -> Any:
        """Import `source`: a capsule or an `ExchangeObject`, of a kind declared in
        `capabilities().imports`. Consume it (or let it go: it is released when dropped)."""
        raise NotImplementedError

    def make_writable(self, result: Any) -> Any:
        """`result`, made by `from_dlpack` (or `importer`) of a legacy capsule and so marked
        read-only, with write access to its memory: for `Capabilities.writable_legacy_import`.
        The core calls it only where the plan says the memory may be written."""
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

    def synchronize(self) -> None:
        """Wait until the framework has finished pending work, including freeing memory it
        took through DLPack (MXNet's asynchronous engine calls deleters later). The kit calls
        it before counting releases; frameworks that release synchronously keep the default."""

    # --- for the matrix and the conformance kit: the framework's own APIs only -------------
    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        """A deterministic tensor of `dtype` and `shape` (values from interop.samples); raise
        for a dtype the framework cannot make (the kit then skips that case)."""
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

    # --- sharded arrays (optional, contract 1.1) ---------------------------------------------
    def sharded(self) -> ShardedArrays | None:
        """The framework's distributed arrays (`ShardedArrays`), or None (the default): no
        sharded conversion from or into this framework, its arrays convert one by one. Return
        the same object every time; called only once the framework is imported."""
        return None

    # --- gradients across frameworks (optional, contract 1.1) ---------------------------------
    def grad_source(self) -> Any:
        """An `interop.grad.Source` (subclassed for this framework): functions written with
        its API can be wrapped by `interop.wrap`, which runs them and their reverse rule with
        it. None (the default): they cannot. Return the same object every time; it must not
        import the framework until one of its methods runs on a wrapped call."""
        return None

    def grad_target(self) -> Any:
        """An `interop.grad.Target` (subclassed for this framework): functions `interop.wrap`
        wraps can be called with its tensors and differentiated by its autodiff. None (the
        default): they cannot. Return the same object every time; imports as `grad_source`."""
        return None

    # --- cross-framework tests (optional): the `framework` fixture of interop's pytest plugin --
    def array_namespace(self) -> Any:
        """The module users write array code against (`xp` in the array API's words): the
        framework's top module by default; JAX's `jax.numpy`, TensorFlow's
        `tf.experimental.numpy`, MXNet's `mx.np` and MLX's `mlx.core` override it. Imports the
        framework (`import_framework`): called only when a test asks for it."""
        return self.import_framework()

    def namespace_array(self, x: Any) -> Any:
        """`x`, a result of `from_dlpack`, as the array type `array_namespace()` works on (the
        same object by default; MXNet's `mx.nd.NDArray` becomes an `mx.np.ndarray`)."""
        return x

    # --- pytree nodes (optional, contract 1.1) ------------------------------------------------
    def tree_node(self) -> TreeNodes | None:
        """A function `node(x)` giving the `TreeNode` of a container the framework's pytree
        registry knows (a Flax struct, a class registered with torch's registry), or None for
        anything else; `interop.convert_tree` then walks such containers one level at a time.
        None (the default): the framework brings no tree nodes. Return the same function every
        time. The core asks only while the framework is imported, and only about objects that
        are not tensors, scalars, or the standard containers it walks itself (dicts, lists,
        tuples, namedtuples, deques), before it takes a dataclass apart; the function must import
        nothing (read `sys.modules`)."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _version_text(version: Any) -> str:
    if isinstance(version, tuple) and len(version) == 2:
        return "{}.{}".format(*version)
    return repr(version)


def contract_problem(adapter: Adapter) -> str | None:
    """Why the core must not use `adapter` (written for another contract), or None."""
    written_for = getattr(adapter, "contract", None)
    core = _version_text(CONTRACT_VERSION)
    if written_for is None:
        return (
            f"{type(adapter).__name__} declares no contract version; set "
            f"contract = {CONTRACT_VERSION!r} once it meets contract {core} (docs/plugins.md)"
        )
    valid = (
        isinstance(written_for, tuple)
        and len(written_for) == 2
        and all(type(part) is int for part in written_for)
    )
    if not valid:
        return f"{type(adapter).__name__}.contract must be (major, minor), not {written_for!r}"
    if written_for[0] != CONTRACT_VERSION[0] or written_for > CONTRACT_VERSION:
        return (
            f"written for adapter contract {_version_text(written_for)}; this interop-hub "
            f"implements contract {core} (install the interop-hub version the plugin requires)"
        )
    return None


def supported_range(
    adapter: Adapter, requires: Iterable[str] | None, installed: str | None
) -> tuple[str | None, str | None]:
    """The framework versions `adapter` supports: its `supported_versions` when set, else the
    range its distribution's requirements (`requires`, Requires-Dist lines) give the installed
    framework distribution `installed`; unbounded when neither says."""
    if adapter.supported_versions is not None:
        return adapter.supported_versions
    from .versions import framework_bounds

    names = adapter.distributions or adapter.modules[:1]
    return framework_bounds(requires, names, installed) or (None, None)


def _strings(value: Any) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, str) and v for v in value)


def check_adapter(adapter: Adapter) -> Capabilities:
    """Check an adapter's declarations (raising AdapterError naming the attribute at fault)
    and return its capabilities."""
    kind = type(adapter).__name__
    if not isinstance(adapter.name, str) or not adapter.name:
        raise AdapterError(f"{kind}.name must be a non-empty string, not {adapter.name!r}")
    for attribute in ("aliases", "modules", "distributions"):
        if not _strings(getattr(adapter, attribute)):
            value = getattr(adapter, attribute)
            raise AdapterError(f"{kind}.{attribute} must be a tuple of strings, not {value!r}")
    if not adapter.modules:
        raise AdapterError(f"{kind}.modules must name the framework's top-level module")
    bounds = adapter.supported_versions
    if bounds is not None and not (
        isinstance(bounds, tuple)
        and len(bounds) == 2
        and all(b is None or isinstance(b, str) for b in bounds)
    ):
        raise AdapterError(
            f"{kind}.supported_versions must be (lowest, highest) strings or None, not {bounds!r}"
        )
    caps = adapter.capabilities()
    if not isinstance(caps, Capabilities):
        raise AdapterError(f"{adapter!r}.capabilities() is not a Capabilities")
    return caps


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
