"""Adapters found through the ``interop.adapters`` entry points, loaded lazily and in isolation.

Entry points are read once. An adapter module is imported only when its framework is involved
(its tensors appear, or a user names it); a plugin that fails to import, to load, or later to
keep its contract (an `owns()` that raises, no `tensor_types()`) is recorded with its error and
never stops the others. ``INTEROP_DISABLE`` (comma-separated adapter names, aliases or
distribution names) switches adapters off. Two entry points with one name: the one chosen by
``INTEROP_ADAPTER_<NAME>=<distribution>`` wins, else the framework's own ``interop-<name>``,
else the distribution whose name sorts first; the others are reported as shadowed (with a
`ShadowedAdapterWarning`, once) — unless the winner is broken, in which case the next one takes
the name. Alias conflicts are reported, never silent. A load whose probe fails (its
`capabilities()` raising) is reported broken but retried at the next need, and no adapter is
loaded while a loaded adapter says the code runs under a foreign tracer (`Adapter.tracer`).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import roles
from .adapter import (
    Adapter,
    check_adapter,
    contract_problem,
    dlpack_versions,
    supported_range,
    written_shimmed,
)
from .errors import AdapterError, BrokenAdapterError, UnknownFrameworkError
from .versions import normalise

if TYPE_CHECKING:
    import importlib.metadata

ENTRY_POINT_GROUP = "interop.adapters"
DISABLE_ENV = "INTEROP_DISABLE"
CHOOSE_ENV = "INTEROP_ADAPTER_{}"  # INTEROP_ADAPTER_TORCH=<distribution>: who serves "torch"

AVAILABLE = "available"  # found, not loaded yet
LOADED = "loaded"
BROKEN = "broken"
DISABLED = "disabled"
SHADOWED = "shadowed"
UNSUPPORTED_VERSION = "unsupported version"
INCOMPATIBLE_CONTRACT = "incompatible contract"  # written for another adapter contract
UNUSABLE = (BROKEN, UNSUPPORTED_VERSION, INCOMPATIBLE_CONTRACT, DISABLED)
#: the frameworks this project ships adapters for (interop-<name>): name -> its top module
FRAMEWORKS = {
    "cupy": "cupy",
    "jax": "jax",
    "mlx": "mlx",
    "mxnet": "mxnet",
    "numpy": "numpy",
    "paddle": "paddle",
    "tensorflow": "tensorflow",
    "torch": "torch",
}


@dataclass(frozen=True)
class AdapterInfo:
    """One adapter as `interop.adapters()` and `interop list` report it."""

    name: str
    status: str
    distribution: str | None
    distribution_version: str | None
    entry_point: str | None
    framework_installed: bool | None
    framework_version: str | None
    dlpack: str | None
    error: str | None
    #: why a loaded adapter cannot convert here ("no CUDA device"), or None
    unavailable: str | None = None
    #: what the adapter's capabilities say besides the data (Capabilities.notes), and conflicts
    notes: tuple[str, ...] = ()
    #: dtype -> what `explain` says of conversions into it in that dtype (dtype_notes)
    dtype_notes: dict[str, str] = field(default_factory=dict)
    #: the adapter contract it was written for ("2.0"; "1.1 (through the 1.x shim)")
    contract: str | None = None
    #: the roles it declares (`interop.roles`), by name
    roles: tuple[str, ...] = ()


@dataclass
class _Record:
    name: str
    entry_point: importlib.metadata.EntryPoint | None
    distribution: str | None
    distribution_version: str | None
    adapter: Adapter | None = None
    status: str = AVAILABLE
    error: str | None = None
    conflicts: list[str] = field(default_factory=list)
    #: the adapter's aliases, once its class or instance could be read (broken ones too)
    aliases: tuple[str, ...] = ()
    #: its probe failed: reported broken, loaded again at the next need
    retry: bool = False
    #: what its entry point gave, before its contract was checked
    instance: object = None
    #: the roles its adapter declares, read once when it is accepted
    roles: tuple[type[roles.Role], ...] = ()


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def version_supported(version: str, bounds: tuple[str | None, str | None]) -> bool:
    """Whether `version` lies in [low, high) (numeric release parts only)."""
    low, high = bounds
    current = _version_tuple(version)
    return (low is None or current >= _version_tuple(low)) and (
        high is None or current < _version_tuple(high)
    )


def _disabled_names() -> set[str]:
    return {n.strip().lower() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def choose_env(name: str) -> str:
    """The variable that names the distribution serving adapter `name`."""
    return CHOOSE_ENV.format(re.sub(r"\W", "_", name).upper())


def _precedence(name: str, dist: str | None) -> int:
    """0: the distribution chosen by INTEROP_ADAPTER_<NAME>; 1: the framework's own
    interop-<name>; 2: any other (then by distribution name)."""
    own = normalise(dist or "")
    chosen = os.environ.get(choose_env(name), "").strip()
    if chosen and own == normalise(chosen):
        return 0
    return 1 if own == normalise(f"interop-{name}") else 2


class ShadowedAdapterWarning(UserWarning):
    """Two distributions register an adapter under one name: one of them is not used."""


class TracingError(AdapterError):
    """An adapter cannot be loaded now: the code runs under a foreign tracer (torch.compile),
    under which its probes would measure the tracer instead of the framework."""


class _ProbeFailed(AdapterError):
    """The adapter loaded but its `capabilities()` (where adapters probe) raised."""


def check_contract(adapter: object) -> Adapter:
    """The adapter, if it declares what the core relies on (a 1.x one wrapped by the shim,
    `interop.compat`); else an AdapterError saying what (`IncompatibleContract` when it was
    written for another contract version)."""
    if not isinstance(adapter, Adapter):
        raise AdapterError(f"{adapter!r} is not an interop.Adapter")
    incompatible = contract_problem(adapter)  # before any other hook is called
    if incompatible is not None:
        raise IncompatibleContract(incompatible)
    shimmed = written_shimmed(adapter.contract)
    if shimmed:
        from .compat import upgrade

        adapter = upgrade(adapter)
    try:
        check_adapter(adapter, shimmed=shimmed)
    except AdapterError:
        raise
    except Exception as exc:
        raise _ProbeFailed(
            f"{adapter!r}.capabilities() failed: {type(exc).__name__}: {exc}"
        ) from exc
    return adapter


def _aliases_of(adapter: object) -> tuple[str, ...]:
    """The lower-cased aliases an adapter class or instance declares, if readable."""
    aliases = getattr(adapter, "aliases", ())
    if not isinstance(aliases, tuple):
        return ()
    return tuple(a.lower() for a in aliases if isinstance(a, str))


def _may_hold(instance: object, role: type[roles.Role]) -> bool:
    """Whether what an entry point gave declares `role` (a 1.x one: implements its hooks, as
    the shim will declare), read from its class without loading it."""
    if not isinstance(instance, Adapter):
        return False
    if written_shimmed(instance.contract):
        from .compat import implemented

        return role in implemented(type(instance))
    return isinstance(instance, role)


def _contract_text(adapter: Adapter) -> str:
    """The contract a loaded adapter was written for, for `interop list`."""
    from .compat import Shimmed

    if isinstance(adapter, Shimmed):
        return "{}.{} (through the 1.x shim)".format(*adapter.written_for)
    return "{}.{}".format(*(adapter.contract or (0, 0)))


class IncompatibleContract(AdapterError):
    """An adapter written for another version of the adapter contract."""


class TypeTable:
    """Answers by type that do not keep the types alive (classes can be made by the thousand)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[type], Any]] = {}

    def get(self, kind: type, default: Any = None) -> Any:
        entry = self._entries.get(id(kind))
        if entry is not None and entry[0]() is kind:
            return entry[1]
        return default

    def set(self, kind: type, value: Any) -> None:
        key = id(kind)
        entries = self._entries

        def forget(_: object, key: int = key) -> None:
            entries.pop(key, None)

        try:
            self._entries[key] = (weakref.ref(kind, forget), value)
        except TypeError:  # a type that cannot be weakly referenced: not remembered
            pass

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_MISSING = object()


class Registry:
    """Every adapter the process knows, by name and alias, loaded on first need."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: dict[str, _Record] | None = None
        self._shadowed: list[_Record] = []
        self._aliases: dict[str, str] = {}
        #: bumped whenever an adapter is loaded, registered, broken or retired: what callers
        #: that cache answers about the adapters (`imported()`) key them by
        self.generation = 0
        self._by_type = TypeTable()
        #: role -> (the generation it was found in, its holder)
        self._holders: dict[type[roles.Role], tuple[int, Adapter | None]] = {}
        #: type -> (the generation it was found in, the `StandIns` adapter naming it)
        self._stand_ins = TypeTable()

    # --- discovery -------------------------------------------------------------------------
    def _discover(self) -> dict[str, _Record]:
        if self._records is not None:
            return self._records
        with self._lock:
            if self._records is not None:
                return self._records
            import importlib.metadata  # ~14 ms: read once, on first need

            def order(ep: importlib.metadata.EntryPoint) -> tuple[int, str, str]:
                dist = (ep.dist.name if ep.dist else "") or ""
                return (_precedence(ep.name, dist), dist, ep.value)

            found = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=order)
            disabled = _disabled_names()
            records: dict[str, _Record] = {}
            for ep in found:
                dist = ep.dist.name if ep.dist else None
                record = _Record(ep.name, ep, dist, ep.dist.version if ep.dist else None)
                if ep.name.lower() in disabled or (dist or "").lower() in disabled:
                    record.status = DISABLED
                    record.error = f"disabled by {DISABLE_ENV}"
                    self._shadowed.append(record)
                elif ep.name in records:
                    record.status = SHADOWED
                    record.error = (
                        f"shadowed by {records[ep.name].distribution} (same name; "
                        f"{choose_env(ep.name)}={dist} chooses this one)"
                    )
                    self._shadowed.append(record)
                else:
                    records[ep.name] = record
            self._records = records
            self._warn_shadowed(records)
            return records

    def _warn_shadowed(self, records: dict[str, _Record]) -> None:
        """One warning per shadowed name, unless the user chose its winner by name."""
        for name, winner in records.items():
            others = [
                r.distribution or "?"
                for r in self._shadowed
                if r.name == name and r.status == SHADOWED
            ]
            if not others or _precedence(name, winner.distribution) == 0:
                continue
            warnings.warn(
                f"{len(others) + 1} distributions register an interop adapter named {name!r}: "
                f"{winner.distribution} is used, {', '.join(others)} shadowed. The framework's "
                f"own interop-{name} comes first; set {choose_env(name)}=<distribution> to "
                "choose another (interop list shows them all)",
                ShadowedAdapterWarning,
                stacklevel=4,
            )

    def _retire(self, record: _Record) -> None:
        """Take a record that cannot serve its name off it; the next same-named entry point
        that is only shadowed takes the name instead."""
        self.generation += 1
        records = self._discover()
        if records.get(record.name) is not record:
            return
        del records[record.name]
        self._shadowed.append(record)
        for other in self._shadowed:
            if other.name == record.name and other.status == SHADOWED:
                self._shadowed.remove(other)
                other.status, other.error = AVAILABLE, None
                records[record.name] = other
                return

    def _instance(self, record: _Record) -> object:
        """What the entry point gives (instantiated once), its contract not checked yet."""
        if record.instance is None:
            assert record.entry_point is not None
            loaded = record.entry_point.load()
            record.aliases = _aliases_of(loaded)
            record.instance = loaded() if isinstance(loaded, type) else loaded
            record.aliases = _aliases_of(record.instance) or record.aliases
        return record.instance

    def _tracer(self, record: _Record) -> str | None:
        """The foreign tracer running this code, as a loaded adapter, `record`'s own, or that
        of a framework already imported (its adapter not loaded yet) says."""
        asked: list[object] = []
        for other in list(self._discover().values()):
            if other.adapter is not None:
                asked.append(other.adapter)
            elif other.status == AVAILABLE and other.name in sys.modules and other is not record:
                try:
                    asked.append(self._instance(other))
                except Exception:  # reported when it is loaded
                    continue
        asked.append(record.instance)
        for adapter in asked:
            if not isinstance(adapter, Adapter) or contract_problem(adapter) is not None:
                continue
            try:
                found = adapter.tracer()
            except Exception:  # a failing hook says nothing
                continue
            if found:
                return str(found)
        return None

    def _load(self, record: _Record) -> Adapter:
        if record.adapter is not None:
            return record.adapter
        if record.status in UNUSABLE and not record.retry:
            raise BrokenAdapterError(f"the {record.name!r} adapter is unusable: {record.error}")
        with self._lock:
            if record.adapter is not None:
                return record.adapter
            try:
                adapter = self._instance(record)
                if isinstance(adapter, Adapter) and contract_problem(adapter) is None:
                    tracer = self._tracer(record)  # before its probes run
                    if tracer is not None:
                        raise TracingError(
                            f"the {record.name!r} adapter cannot be loaded while {tracer} "
                            f"traces this code (its probes would measure {tracer}); convert "
                            f"to or from {record.name} once outside {tracer} first"
                        )
                adapter = check_contract(adapter)
                if adapter.name != record.name:
                    raise AdapterError(
                        f"entry point {record.name!r} loads an adapter named {adapter.name!r}"
                    )
            except TracingError:
                raise  # not loaded, not broken: loaded at its next need outside the tracer
            except IncompatibleContract as exc:
                record.status, record.error, record.retry = INCOMPATIBLE_CONTRACT, str(exc), False
                self._retire(record)
                raise BrokenAdapterError(
                    f"the {record.name!r} adapter is unusable: {record.error}"
                ) from exc
            except _ProbeFailed as exc:  # maybe transient: kept on its name, tried again
                record.status, record.error, record.retry = BROKEN, str(exc), True
                self._by_type.clear()
                raise BrokenAdapterError(
                    f"the {record.name!r} adapter (from {record.distribution}) failed its "
                    f"probe: {record.error} (it is tried again at its next use)"
                ) from exc
            except Exception as exc:  # a broken plugin is reported, never fatal
                record.retry = False
                self._break(record, exc)
                raise BrokenAdapterError(
                    f"the {record.name!r} adapter (from {record.distribution}) failed to load: "
                    f"{record.error}"
                ) from exc
            record.status, record.error, record.retry = AVAILABLE, None, False
            self._accept(record, adapter)
            return adapter

    def _break(self, record: _Record, exc: BaseException) -> None:
        record.status = BROKEN
        record.error = f"{type(exc).__name__}: {exc}"
        record.adapter = None
        self._by_type.clear()
        self._retire(record)

    def _accept(self, record: _Record, adapter: Adapter) -> None:
        disabled = _disabled_names() & {a.lower() for a in adapter.aliases}
        if disabled and record.entry_point is not None:
            record.status = DISABLED
            record.error = f"disabled by {DISABLE_ENV} (alias {', '.join(sorted(disabled))})"
            self._retire(record)
            raise BrokenAdapterError(f"the {record.name!r} adapter is {record.error}")
        installed, version = adapter.framework_distribution() or (None, None)
        dist = record.entry_point.dist if record.entry_point else None
        bounds = supported_range(adapter, dist.requires if dist else None, installed)
        if version is not None and not version_supported(version, bounds):
            low, high = bounds
            record.status = UNSUPPORTED_VERSION
            record.error = (
                f"{installed} {version} is installed; the adapter supports "
                f"{installed}>={low or '0'}" + (f",<{high}" if high else "")
            )
            self._retire(record)
            raise BrokenAdapterError(f"the {record.name!r} adapter is unusable: {record.error}")
        record.adapter = adapter
        record.roles = roles.declared(type(adapter))
        record.status = LOADED
        self.generation += 1
        records = self._discover()
        for alias in adapter.aliases:
            key = alias.lower()
            owner = self._aliases.get(key)
            if key in records and key != adapter.name:
                owner = key
            if owner is not None and owner != adapter.name:
                record.conflicts.append(f"alias {alias!r} ignored: it names the {owner} adapter")
            else:
                self._aliases[key] = adapter.name
        self._by_type.clear()

    def _try_load(self, record: _Record) -> Adapter | None:
        try:
            return self._load(record)
        except BrokenAdapterError:
            return None

    # --- lookups ---------------------------------------------------------------------------
    def get(self, name: str) -> Adapter:
        """The adapter called `name` (or one of its aliases), loading it if needed."""
        records = self._discover()
        for _ in range(len(records) + len(self._shadowed) + 1):
            key = self._aliases.get(name.lower(), name)
            record = records.get(key) or records.get(key.lower())
            if record is None:
                for other in list(records.values()):  # aliases are known only once loaded
                    if other.adapter is None and (other.status == AVAILABLE or other.retry):
                        self._try_load(other)
                key = self._aliases.get(name.lower(), name)
                record = records.get(key)
            if record is None:
                break
            try:
                return self._load(record)
            except BrokenAdapterError:
                if records.get(record.name) is record:  # broken, no other to take its name
                    raise
        wanted = name.lower()
        for off in (*records.values(), *self._shadowed):
            if off.status in (BROKEN, UNSUPPORTED_VERSION, INCOMPATIBLE_CONTRACT) and (
                off.name == name or wanted in off.aliases
            ):
                raise BrokenAdapterError(
                    f"the {off.name!r} adapter (from {off.distribution or 'interop.register'}) "
                    f"is unusable: {off.error}"
                )
        known = ", ".join(sorted(records)) or "none"
        hint = ""
        for off in self._shadowed:
            said = (off.error or "").lower()
            if off.status == DISABLED and (off.name == name or f"alias {name.lower()}" in said):
                hint = f" (it is {off.error})"
        raise UnknownFrameworkError(
            f"no adapter for framework {name!r}{hint}; known adapters: {known}. "
            f"Install its interop-<framework> distribution or register one."
        )

    def for_module(self, module: Any) -> Adapter:
        """The adapter owning a framework module object (`convert(x, torch)`)."""
        root = getattr(module, "__name__", "").partition(".")[0]
        adapter = self.detect_module(root)
        if adapter is None:
            raise UnknownFrameworkError(f"no adapter owns the module {root!r}")
        return adapter

    def detect_module(self, root: str) -> Adapter | None:
        records = self._discover()
        if root in records and (records[root].status in (AVAILABLE, LOADED) or records[root].retry):
            if self._try_load(records[root]) is not None:
                return records[root].adapter
        for tier in (True, False):  # first adapters whose framework is imported, then the rest
            for record in list(records.values()):
                ready = record.status == AVAILABLE or record.retry
                if ready and (not tier or record.name in sys.modules):
                    self._try_load(record)
            for record in list(records.values()):
                if record.adapter is not None and root in record.adapter.modules:
                    return record.adapter
        return None

    def _owns(self, record: _Record, x: object) -> bool:
        """`record`'s adapter owns `x`; an adapter whose `owns()` fails is marked broken."""
        adapter = record.adapter
        assert adapter is not None
        try:
            return bool(adapter.owns(x))
        except Exception as exc:
            self._break(record, AdapterError(f"its owns() failed on a {type(x).__name__}: {exc!r}"))
            return False

    def detect(self, x: object) -> Adapter | None:
        """The adapter owning tensor `x`, or None for capsules and unknown DLPack producers."""
        kind = type(x)
        found = self._by_type.get(kind, _MISSING)
        if found is not _MISSING:
            return found
        records = self._discover()
        root = (getattr(kind, "__module__", None) or "").partition(".")[0]
        adapter = self.detect_module(root)
        record = records.get(adapter.name) if adapter is not None else None
        if record is not None and not self._owns(record, x):
            adapter = None
        if adapter is None:  # a subclass from another module, say
            for record in list(records.values()):
                if record.adapter is not None and record.adapter.imported():
                    if self._owns(record, x):
                        adapter = record.adapter
                        break
        self._by_type.set(kind, adapter)
        return adapter

    def stand_in(self, x: object) -> Any | None:
        """The tensor an adapter's `StandIns` role makes of `x` (a NumPy scalar: a 0-d array),
        or None: the adapter is found once per type (its module's, then any imported)."""
        kind = type(x)
        known = self._stand_ins.get(kind)
        if known is None or known[0] != self.generation:
            holder = self._stand_in_holder(kind) if self.detect(x) is None else None
            known = (self.generation, holder)
            self._stand_ins.set(kind, known)
        return None if known[1] is None else known[1].stand_in(x)

    def _stand_in_holder(self, kind: type) -> Adapter | None:
        root = (getattr(kind, "__module__", None) or "").partition(".")[0]
        own = self.detect_module(root)
        records = sorted(self._discover().values(), key=lambda r: r.adapter is not own)
        for record in records:  # its module's adapter first, then those imported (as `detect`)
            adapter = record.adapter
            if adapter is None or roles.StandIns not in record.roles:
                continue
            if adapter is not own and not adapter.imported():
                continue
            try:
                if issubclass(kind, adapter.stand_in_types()):
                    return adapter
            except Exception as exc:
                self._break(record, AdapterError(f"its stand_in_types() failed: {exc!r}"))
        return None

    # --- roles ------------------------------------------------------------------------------
    def roles_of(self, adapter: Adapter) -> tuple[type[roles.Role], ...]:
        """The roles `adapter` declares (`interop.roles`), read once when it was accepted."""
        for record in list(self._discover().values()):
            if record.adapter is adapter:
                return record.roles
        return roles.declared(type(adapter))

    def role_holder(self, role: type[roles.R]) -> roles.R | None:
        """The adapter declaring `role` (`HostCopier`: the one whose copies the core makes on
        the host), or None: asked of the loaded adapters, then of those whose framework is
        imported, then of the others, each tier by name. Only the holder is loaded (the
        others' classes are read, no framework is imported). Found again only once an adapter
        is loaded, registered or broken."""
        known = self._holders.get(role)
        if known is not None and known[0] == self.generation:
            return known[1]  # type: ignore[return-value]
        holder = self._find_holder(role)
        self._holders[role] = (self.generation, holder)
        return holder  # type: ignore[return-value]  # (an adapter, declaring `role`)

    def _find_holder(self, role: type[roles.Role]) -> Adapter | None:
        def tier(record: _Record) -> tuple[bool, bool, str]:
            return (record.adapter is None, record.name not in sys.modules, record.name)

        for record in sorted(self._discover().values(), key=tier):
            if record.adapter is None:
                if not (record.status == AVAILABLE or record.retry):
                    continue
                try:
                    if not _may_hold(self._instance(record), role):
                        continue
                except Exception:  # reported when it is loaded
                    continue
                self._try_load(record)
            if record.adapter is not None and role in record.roles:
                return record.adapter
        return None

    # --- changes and reports ---------------------------------------------------------------
    def register(self, adapter: Adapter, *, replace: bool = False) -> None:
        try:
            adapter = check_contract(adapter)
        except IncompatibleContract as exc:
            raise AdapterError(f"cannot register {adapter!r}: {exc}") from exc
        records = self._discover()
        with self._lock:
            for record in list(records.values()):  # every alias must be known to find clashes
                if record.status == AVAILABLE:
                    self._try_load(record)
            existing = records.get(adapter.name)
            if existing is not None and not replace:
                raise AdapterError(
                    f"an adapter named {adapter.name!r} already exists "
                    f"(from {existing.distribution or 'interop.register'}); pass replace=True"
                )
            for alias in (adapter.name, *adapter.aliases):
                owner = self._aliases.get(alias.lower())
                if (
                    alias != adapter.name
                    and alias.lower() in records
                    and alias.lower() != adapter.name
                ):
                    owner = alias.lower()
                if owner is not None and owner != adapter.name:
                    raise AdapterError(
                        f"{adapter.name!r} claims the name or alias {alias!r}, which is the "
                        f"{owner} adapter's"
                    )
            record = _Record(adapter.name, None, None, None)
            for alias, target in list(self._aliases.items()):
                if target == adapter.name:
                    del self._aliases[alias]
            records[adapter.name] = record
            self._accept(record, adapter)

    def infos(self) -> list[AdapterInfo]:
        records = self._discover()
        for record in list(records.values()):
            if record.status == AVAILABLE or record.retry:
                self._try_load(record)
        out = []
        for record in sorted([*records.values(), *self._shadowed], key=lambda r: r.name):
            adapter = record.adapter
            installed = version = dlpack = unavailable = None
            notes: tuple[str, ...] = tuple(record.conflicts)
            dtype_notes: dict[str, str] = {}
            contract = None
            if adapter is not None:
                contract = _contract_text(adapter)
                try:
                    installed = adapter.installed()
                    version = adapter.framework_version()
                    caps = adapter.capabilities()
                    dlpack = dlpack_versions(caps)
                    unavailable = adapter.unavailable()
                    notes = (*caps.notes, *notes)
                    dtype_notes = dict(sorted(caps.dtype_notes.items()))
                except Exception as exc:  # reported, never fatal
                    unavailable = f"{type(exc).__name__}: {exc}"
            out.append(
                AdapterInfo(
                    record.name,
                    record.status,
                    record.distribution,
                    record.distribution_version,
                    record.entry_point.value if record.entry_point else None,
                    installed,
                    version,
                    dlpack,
                    record.error,
                    unavailable,
                    notes,
                    dtype_notes,
                    contract,
                    tuple(role.__name__ for role in record.roles),
                )
            )
        return out

    def imported(self) -> list[Adapter]:
        """The adapters whose framework the program has imported, loading those (and only
        those) not loaded yet: an adapter not loaded counts as imported when a module of its
        name is, as for `detect_module`."""
        out = []
        for record in list(self._discover().values()):
            adapter = record.adapter
            if adapter is None:
                if record.name not in sys.modules or not (
                    record.status == AVAILABLE or record.retry
                ):
                    continue
                try:
                    adapter = self._load(record)
                except AdapterError:  # broken, or a tracer runs: reported when it is needed
                    continue
            try:
                if adapter.imported():
                    out.append(adapter)
            except Exception:  # a failing hook says "not imported"
                continue
        return out

    def loaded(self) -> list[Adapter]:
        """Every adapter that loads, loading them all."""
        out = []
        for record in list(self._discover().values()):
            adapter = record.adapter or self._try_load(record)
            if adapter is not None:
                out.append(adapter)
        return out


REGISTRY = Registry()


def missing_adapters(registry: Registry = REGISTRY) -> dict[str, str]:
    """Frameworks installed here whose adapter distribution is not: name -> the install line.
    Found with `importlib.util.find_spec`, without importing them."""
    import importlib.util

    registry._discover()
    known = {r.name for r in (*(registry._records or {}).values(), *registry._shadowed)}
    missing = {}
    for name, module in FRAMEWORKS.items():
        if name in known:
            continue
        try:
            found = module in sys.modules or importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            missing[name] = install_line(name)
    return missing


def install_line(name: str) -> str:
    """The line that installs `name`'s adapter, as it works from here: an interop installed from
    a clone (editable or not, its adapters/ folder beside the package) names the clone's folder,
    relative to the working directory when that is inside the clone; else PyPI's name."""
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "adapters" / name
    if not folder.is_dir():
        return f"pip install interop-{name}"
    here = Path.cwd().resolve()
    where = f"./{folder.relative_to(here).as_posix()}" if folder.is_relative_to(here) else folder
    return f"pip install {where}"
