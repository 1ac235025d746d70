"""The compiled twin of the warm path (`interop._speedups`): the front and each route are C
objects, keyed by a fingerprint computed in C from the capsule the source exports; the C
code holds strong references across every call into Python and lets a BaseException that
is not an Exception through, as the pure twin does."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .. import readonly
from ..adapter import Adapter
from ..plan import KEYS_OMIT, dotted_name
from .interface import Lesson, Route

_API = "__dlpack_c_exchange_api__"


class CompiledFastPath:
    """Routes as `_speedups.Route` objects behind a `_speedups.Front`."""

    compiled = True
    label = "compiled"
    #: (its keys pack every fact of the capsule, the data address's alignment included)
    key_omits = KEYS_OMIT - {"alignment"}

    def __init__(self, speedups: Any) -> None:
        self._c = speedups

    def front(self, table: dict[type, dict[Any, Route]], slow: Callable[..., Any]) -> Any:
        return self._c.Front(table, slow)

    def capsule_key(self, capsule: Any) -> int:
        return int(self._c.fingerprint(capsule))

    def lesson_key(self, x: Any, adapter: Adapter, capsule_key: int) -> Hashable | None:
        return capsule_key

    def tensor_key(self, x: Any, adapter: Adapter, exporter: Any) -> Hashable | None:
        return self._c.fingerprint(exporter(x)) if exporter else None  # read, freed unused

    def shape(self, lesson: Lesson) -> Hashable:
        # keys of one route must agree on its exporter (MXNet's booleans export otherwise),
        # its bridge and whether the result is made writable
        bridge = lesson.bridge
        rebox = None if bridge is None else (bridge.versioned, bridge.read_only)
        rewrap = lesson.rewrap
        defer = None if rewrap is None else (rewrap.defer, rewrap.claim)
        return (lesson.exporter, rebox, defer, lesson.import_.writable)

    def build(self, lesson: Lesson, known: dict[Hashable, Any], copies: bool) -> Route:
        # (every C route serves copying keys: their entries are 1-tuples, told apart in C)
        bridge, tcaps, target, rewrap = lesson.bridge, lesson.tcaps, lesson.target, lesson.rewrap
        route: Route = self._c.Route(
            known=known,
            exporter=lesson.exporter,
            guards=lesson.adapter.route_guards,
            ranges=lesson.ranges,
            policy=readonly.current_policy,
            share=readonly.SHARE,
            source=lesson.kind,
            target=target.tensor_types()[0],
            versioned=lesson.info.version is not None,
            as_object=lesson.import_.as_object,
            guarded=lesson.guarded,
            defer=bool(rewrap and rewrap.defer),
            claim=bool(rewrap and rewrap.claim),
            import_guard=target.import_guard(),
            bridge=-1 if bridge is None else int(bridge.versioned),
            bridge_read_only=bool(bridge and bridge.read_only),
            min_ndim=tcaps.min_ndim,
            max_ndim=-1 if tcaps.max_ndim is None else tcaps.max_ndim,
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
