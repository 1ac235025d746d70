"""The compiled twin of the warm path (`interop._speedups`): the front and each route are C
objects, keyed by a fingerprint computed in C from the capsule the source exports; the C
code holds strong references across every call into Python and lets a BaseException that
is not an Exception through, as the pure twin does."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .. import readonly
from ..adapter import Adapter
from ..plan import dotted_name
from .interface import Lesson, Route

_API = "__dlpack_c_exchange_api__"


class CompiledFastPath:
    """Routes as `_speedups.Route` objects behind a `_speedups.Front`."""

    compiled = True
    label = "compiled"

    def __init__(self, speedups: Any) -> None:
        self._c = speedups

    def front(self, table: dict[type, dict[Any, Route]], slow: Callable[..., Any]) -> Any:
        return self._c.Front(table, slow)

    def capsule_key(self, capsule: Any) -> int:
        return int(self._c.fingerprint(capsule))

    def lesson_key(
        self, x: Any, adapter: Adapter, capsule_key: int, align: int, alignment: int
    ) -> Hashable | None:
        return capsule_key  # (it packs the address's alignment)

    def tensor_key(self, x: Any, adapter: Adapter, exporter: Any, align: int) -> Hashable | None:
        return self._c.fingerprint(exporter(x)) if exporter else None  # read, freed unused

    def shape(self, lesson: Lesson) -> Hashable:
        # keys of one route must agree on its exporter (MXNet's booleans export otherwise),
        # its exchange APIs, its bridge and whether the result is made writable (a key whose
        # plan lets the bridge box read-only memory legacy where the route's does not is
        # given back by the route's own check)
        bridge = lesson.rebox
        rebox = None if bridge is None else (bridge.versioned, bridge.read_only)
        rewrap = lesson.rewrap
        defer = None if rewrap is None else (rewrap.defer, rewrap.claim)
        apis = (lesson.export_api, lesson.import_api)
        return (lesson.exporter, apis, rebox, defer, lesson.import_.writable)

    def build(self, lesson: Lesson, known: dict[Hashable, Any], copies: bool) -> Route:
        # (every C route serves copying keys: their entries are 1-tuples, told apart in C);
        # it runs the lesson's steps as they are: C decides no export, bridge or import
        bridge, import_, rewrap = lesson.rebox, lesson.import_, lesson.rewrap
        route: Route = self._c.Route(
            known=known,
            exporter=lesson.exporter,
            guards=lesson.adapter.route_guards,
            ranges=lesson.ranges,
            policy=readonly.current_policy,
            share=readonly.SHARE,
            source=lesson.kind,
            export_api=lesson.export_api,
            import_api=lesson.import_api,
            versioned=lesson.info.version is not None,
            as_object=lesson.import_.as_object,
            guarded=lesson.guarded,
            defer=bool(rewrap and rewrap.defer),
            claim=bool(rewrap and rewrap.claim),
            import_guard=lesson.target.import_guard(),
            bridge=-1 if bridge is None else int(bridge.versioned),
            bridge_read_only=bool(bridge and bridge.read_only),
            legacy_read_only_ok=bool(bridge and bridge.legacy_read_only_ok),
            min_ndim=import_.min_ndim,
            max_ndim=-1 if import_.max_ndim is None else import_.max_ndim,
        )
        return route

    def entry(self, lesson: Lesson, route: Route) -> Any:
        return lesson.importer if lesson.replay is None else (lesson.replay,)

    def copy_shape(self, exporter: Any, versioned: bool) -> Hashable:
        # a copy's key is read off the capsule the route exports: the same export, same kind
        return (exporter, versioned)

    def replay_of(self, entry: Any) -> Callable[[Any, Any], Any] | None:
        return entry[0] if type(entry) is tuple else None

    def endpoints(self, route: Route, entry: Any, exporter: Any, kind: type) -> tuple[str, str]:
        by_api = getattr(route, "exchange_api", (False, False))
        export = f"{dotted_name(kind)}.{_API}" if by_api[0] else dotted_name(exporter)
        import_ = f"the target type's {_API}" if by_api[1] else dotted_name(entry)
        return export, import_
