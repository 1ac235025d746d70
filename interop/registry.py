"""Adapters found through the ``interop.adapters`` entry points, loaded lazily and in isolation.

Entry points are read once. An adapter module is imported only when its framework is involved
(its tensors appear, or a user names it); a plugin that fails to import or load is recorded with
its error and never stops the others. ``INTEROP_DISABLE`` (comma-separated adapter or
distribution names) switches adapters off. Two entry points with one name: the distribution
whose name sorts first wins and the others are reported as shadowed.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .adapter import Adapter, check_adapter, contract_problem, dlpack_versions, supported_range
from .errors import AdapterError, BrokenAdapterError, UnknownFrameworkError

if TYPE_CHECKING:
    import importlib.metadata

ENTRY_POINT_GROUP = "interop.adapters"
DISABLE_ENV = "INTEROP_DISABLE"

AVAILABLE = "available"  # found, not loaded yet
LOADED = "loaded"
BROKEN = "broken"
DISABLED = "disabled"
SHADOWED = "shadowed"
UNSUPPORTED_VERSION = "unsupported version"
INCOMPATIBLE_CONTRACT = "incompatible contract"  # written for another adapter contract


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
    #: what the adapter's capabilities say besides the data (Capabilities.notes)
    notes: tuple[str, ...] = ()


@dataclass
class _Record:
    name: str
    entry_point: importlib.metadata.EntryPoint | None
    distribution: str | None
    distribution_version: str | None
    adapter: Adapter | None = None
    status: str = AVAILABLE
    error: str | None = None


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


class Registry:
    """Every adapter the process knows, by name and alias, loaded on first need."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: dict[str, _Record] | None = None
        self._shadowed: list[_Record] = []
        self._aliases: dict[str, str] = {}
        self._by_type: dict[type, Adapter | None] = {}

    # --- discovery -------------------------------------------------------------------------
    def _discover(self) -> dict[str, _Record]:
        if self._records is not None:
            return self._records
        with self._lock:
            if self._records is not None:
                return self._records
            import importlib.metadata  # ~14 ms: read once, on first need

            found = sorted(
                importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                key=lambda ep: ((ep.dist.name if ep.dist else "") or "", ep.value),
            )
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
                    record.error = f"shadowed by {records[ep.name].distribution} (same name)"
                    self._shadowed.append(record)
                else:
                    records[ep.name] = record
            self._records = records
            return records

    def _load(self, record: _Record) -> Adapter:
        if record.adapter is not None:
            return record.adapter
        if record.status in (BROKEN, UNSUPPORTED_VERSION, INCOMPATIBLE_CONTRACT):
            raise BrokenAdapterError(f"the {record.name!r} adapter is unusable: {record.error}")
        with self._lock:
            if record.adapter is not None:
                return record.adapter
            try:
                assert record.entry_point is not None
                loaded = record.entry_point.load()
                adapter = loaded() if isinstance(loaded, type) else loaded
                if not isinstance(adapter, Adapter):
                    raise AdapterError(f"{record.entry_point.value} is not an interop.Adapter")
                if adapter.name != record.name:
                    raise AdapterError(
                        f"entry point {record.name!r} loads an adapter named {adapter.name!r}"
                    )
                incompatible = contract_problem(adapter)  # before any other hook is called
                if incompatible is None:
                    check_adapter(adapter)
            except Exception as exc:  # a broken plugin is reported, never fatal
                record.status = BROKEN
                record.error = f"{type(exc).__name__}: {exc}"
                raise BrokenAdapterError(
                    f"the {record.name!r} adapter (from {record.distribution}) failed to load: "
                    f"{record.error}"
                ) from exc
            if incompatible is not None:
                record.status = INCOMPATIBLE_CONTRACT
                record.error = incompatible
                raise BrokenAdapterError(f"the {record.name!r} adapter is unusable: {incompatible}")
            self._accept(record, adapter)
            return adapter

    def _accept(self, record: _Record, adapter: Adapter) -> None:
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
            raise BrokenAdapterError(f"the {record.name!r} adapter is unusable: {record.error}")
        record.adapter = adapter
        record.status = LOADED
        for alias in adapter.aliases:
            self._aliases.setdefault(alias.lower(), adapter.name)
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
        key = self._aliases.get(name.lower(), name)
        record = records.get(key) or records.get(key.lower())
        if record is None:
            for other in list(records.values()):  # aliases are known only once loaded
                if other.adapter is None and other.status == AVAILABLE:
                    self._try_load(other)
            key = self._aliases.get(name.lower(), name)
            record = records.get(key)
        if record is None:
            known = ", ".join(sorted(records)) or "none"
            hint = ""
            for off in self._shadowed:
                if off.name == name and off.status == DISABLED:
                    hint = f" (it is disabled by {DISABLE_ENV})"
            raise UnknownFrameworkError(
                f"no adapter for framework {name!r}{hint}; known adapters: {known}. "
                f"Install its interop-<framework> distribution or register one."
            )
        return self._load(record)

    def for_module(self, module: Any) -> Adapter:
        """The adapter owning a framework module object (`convert(x, torch)`)."""
        root = getattr(module, "__name__", "").partition(".")[0]
        adapter = self.detect_module(root)
        if adapter is None:
            raise UnknownFrameworkError(f"no adapter owns the module {root!r}")
        return adapter

    def detect_module(self, root: str) -> Adapter | None:
        records = self._discover()
        if root in records and records[root].status in (AVAILABLE, LOADED):
            if self._try_load(records[root]) is not None:
                return records[root].adapter
        for tier in (True, False):  # first adapters whose framework is imported, then the rest
            for record in list(records.values()):
                if record.status == AVAILABLE and (not tier or record.name in sys.modules):
                    self._try_load(record)
            for record in records.values():
                if record.adapter is not None and root in record.adapter.modules:
                    return record.adapter
        return None

    def detect(self, x: object) -> Adapter | None:
        """The adapter owning tensor `x`, or None for capsules and unknown DLPack producers."""
        kind = type(x)
        try:
            return self._by_type[kind]
        except KeyError:
            pass
        root = (getattr(kind, "__module__", None) or "").partition(".")[0]
        adapter = self.detect_module(root)
        if adapter is not None and not adapter.owns(x):
            adapter = None
        if adapter is None:  # a subclass from another module, say
            for record in self._discover().values():
                if record.adapter is not None and record.adapter.imported():
                    if record.adapter.owns(x):
                        adapter = record.adapter
                        break
        self._by_type[kind] = adapter
        return adapter

    # --- changes and reports ---------------------------------------------------------------
    def register(self, adapter: Adapter, *, replace: bool = False) -> None:
        if not isinstance(adapter, Adapter):
            raise AdapterError(f"{adapter!r} is not an interop.Adapter")
        if not adapter.name:
            raise AdapterError(f"{type(adapter).__name__} has no name")
        incompatible = contract_problem(adapter)
        if incompatible is not None:
            raise AdapterError(f"cannot register {adapter!r}: {incompatible}")
        try:
            check_adapter(adapter)
        except AdapterError:
            raise
        except Exception as exc:
            raise AdapterError(f"{adapter!r}.capabilities() failed: {exc!r}") from exc
        records = self._discover()
        with self._lock:
            existing = records.get(adapter.name)
            if existing is not None and not replace:
                raise AdapterError(
                    f"an adapter named {adapter.name!r} already exists "
                    f"(from {existing.distribution or 'interop.register'}); pass replace=True"
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
            if record.status == AVAILABLE:
                self._try_load(record)
        out = []
        for record in sorted([*records.values(), *self._shadowed], key=lambda r: r.name):
            adapter = record.adapter
            installed = version = dlpack = unavailable = None
            notes: tuple[str, ...] = ()
            if adapter is not None:
                installed = adapter.installed()
                version = adapter.framework_version()
                caps = adapter.capabilities()
                dlpack = dlpack_versions(caps)
                unavailable = adapter.unavailable()
                notes = caps.notes
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
                )
            )
        return out

    def loaded(self) -> list[Adapter]:
        """Every adapter that loads, loading them all."""
        return [
            r.adapter
            for r in list(self._discover().values())
            if (r.adapter or self._try_load(r)) is not None and r.adapter is not None
        ]


REGISTRY = Registry()
