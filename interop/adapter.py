"""The adapter contract, version 2.0: what a framework plugin declares (as data) and implements
(as code), and what the core hands it.

This module and `interop.roles` are the contract's one source of truth; `docs/plugins.md`
explains it for plugin authors (and its worked example runs through the conformance kit in
the test suite).

- `Capabilities`: the declaration. Every value is checked when it is made, so a typo fails
  the plugin's registration with a message naming the field, instead of silently changing a
  plan.
- `Adapter`: the required core (names, owned types, capabilities, export, import, copy).
  Everything else is an optional role declared by subclassing one of `interop.roles`
  (`FastPath`, `Devices`, `Testing`, `HostCopier`, `Sharding`, `Gradients`, ...).
- `ExchangeObject`: what `from_dlpack` receives when the adapter imports objects.
- `CONTRACT_VERSION`: an adapter sets `contract` to the version it was written for; the registry
  reports an adapter written for another major version, or a newer minor one, as
  `incompatible contract` and never uses it. An adapter written for contract 1.0 or 1.1 (the
  fat base class of old) loads through `interop.compat`, which declares the roles whose hooks
  it implements.

An adapter module must be cheap to import: it never imports its framework at module level,
only inside methods, and only when one of that framework's tensors is involved.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from . import dlpack as dl
from . import roles
from .errors import AdapterError, UnsupportedDTypeError, typed
from .info import CANONICAL, CONTIGUOUS, LAYOUTS, TensorInfo
from .roles import (  # noqa: F401  (the names adapters of contract 1.x import from here)
    SHARDED_FORMER_NAMES,
    SHARDED_OPTIONAL,
    ShardedArrays,
    TreeNode,
    TreeNodes,
)

if TYPE_CHECKING:  # the core calls any role's hooks on any adapter: declared or defaults
    from .roles import AllRoles as _Hooks
else:
    _Hooks = object

#: The contract this core implements: (major, minor). Minor versions only add optional roles,
#: hooks and `Capabilities` fields; a new major version may change anything.
CONTRACT_VERSION: tuple[int, int] = (2, 1)
#: the oldest and newest contract 1.x adapters the shim (`interop.compat`) loads
SHIMMED_CONTRACTS: tuple[tuple[int, int], tuple[int, int]] = ((1, 0), (1, 1))


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
    #: byte alignment of the compact copies its own `copy()` makes (MLX's allocator: 8): where
    #: a target needs more, the core copies through the host copier instead
    copy_alignment: int = 64
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
    #: pickle (protocol 5), and so Ray, already keeps its tensors' memory out of band (NumPy's
    #: arrays): `interop.ray.install` leaves its types to them
    pickled_out_of_band: bool = False

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
            "pickled_out_of_band": _flag("pickled_out_of_band", self.pickled_out_of_band),
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
            ("copy_alignment", self.copy_alignment),
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


class Adapter(_Hooks):
    """Base class for framework adapters (contract 2.0): the required core. A subclass sets
    the class attributes and implements `tensor_types()` (or `owns()`), `capabilities()`,
    `from_dlpack()` and `copy()`; `export()` and the discovery hooks have defaults right for
    a framework whose tensors speak `__dlpack__`. Everything else is a role the adapter
    declares by subclassing it (`interop.roles`: the fast path, devices, the kit's hooks...).

    `copy()` is core, not a role: the planner may copy at the source for any framework (a
    tensor whose export would lose something, a read-only one into a target that writes, a
    buffer a target refuses to share, `copy=True`), so every plan needs it.
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        roles.fill_defaults(cls)  # the roles it does not declare behave as their defaults

    # --- discovery (never imports the framework) -------------------------------------------
    def installed(self) -> bool:
        """Whether the framework can be imported here (found, not imported); a finder that
        refuses it (raising ImportError, as import blockers do) means it cannot. An imported
        framework is found without asking the finders (every negotiation asks)."""
        if self.modules and sys.modules.get(self.modules[0]) is not None:
            return True
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

    def imported(self) -> bool:
        """Whether the framework is already imported (so its tensors can exist)."""
        return self.modules[0] in sys.modules

    def import_framework(self) -> Any:
        """Import the framework (if the program has not) and return its module: what the core
        calls where it must make the framework's types exist (`interop.ray.install("mxnet")`).
        Override it where a plain `import` needs help (MXNet under NumPy 2, Paddle after
        TensorFlow)."""
        return sys.modules.get(self.modules[0]) or importlib.import_module(self.modules[0])

    # --- the types it owns -------------------------------------------------------------------
    def tensor_types(self) -> tuple[type, ...]:
        """The framework's tensor types; called only once the framework is imported."""
        raise NotImplementedError

    def owns(self, x: object) -> bool:
        return isinstance(x, self.tensor_types())

    # --- what it can do --------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """The declaration; the same object for the same state (plans are cached by it).
        Must not import the framework if the program has not."""
        raise NotImplementedError

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

    def copy(self, x: Any) -> Any:
        """A fresh, compact (row-major), writable copy of one of this framework's tensors."""
        raise NotImplementedError

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
    if written_shimmed(written_for):
        return None
    if written_for[0] != CONTRACT_VERSION[0] or written_for > CONTRACT_VERSION:
        low, high = map(_version_text, SHIMMED_CONTRACTS)
        return (
            f"written for adapter contract {_version_text(written_for)}; this interop-hub "
            f"implements contract {core} and loads {low}-{high} adapters through its shim "
            "(install the interop-hub version the plugin requires)"
        )
    return None


def written_shimmed(written_for: Any) -> bool:
    """Whether an adapter declaring contract `written_for` loads through the 1.x shim."""
    low, high = SHIMMED_CONTRACTS
    return isinstance(written_for, tuple) and low <= written_for <= high


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


def check_adapter(adapter: Adapter, *, shimmed: bool = False) -> Capabilities:
    """Check an adapter's declarations (raising AdapterError naming the attribute at fault)
    and return its capabilities. `shimmed`: a 1.x adapter wrapped by `interop.compat`, whose
    roles need not have every hook 2.0 requires (1.x had none required but the core's)."""
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
    problems = roles.role_problems(type(adapter), required=not shimmed)
    if problems:
        raise AdapterError("; ".join(problems))
    caps = adapter.capabilities()
    if not isinstance(caps, Capabilities):
        raise AdapterError(f"{adapter!r}.capabilities() is not a Capabilities")
    if caps.writable_legacy_import and not isinstance(adapter, roles.WritableImports):
        raise AdapterError(
            f"{kind}: Capabilities.writable_legacy_import needs the WritableImports role "
            "(its make_writable gives the results write access)"
        )
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
