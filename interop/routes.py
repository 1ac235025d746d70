"""Which routes the warm path remembers: plain shares and source-side copies, taken without
planning again.

After a conversion whose plan was "export, share, import" with nothing decided per call, the
hub remembers a route for (source type, target) with the set of fingerprints that allowed it.
A plan that copies on the source side for every tensor its fingerprint stands for is
remembered too: the route replays that copy (the source's own, or NumPy's of its memory) and
converts the copy as any fresh tensor is, through its own route. A later call whose
fingerprint is in the set goes straight through; anything else (an unknown fingerprint, a
failure, a capsule that fails the route's check) takes the full path, which plans, raises the
typed errors, and may teach the route a new fingerprint.

Routes are keyed here, per (source type, target) and fingerprint, only where the plan chose
one; the hub's `FastPath` (`interop.fastpath`: compiled or pure Python, chosen once per hub)
builds and runs them, and says what its fingerprints are made of.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

from .adapter import Adapter, Capabilities
from .fastpath import FastPath, Lesson, Route, choose
from .info import TensorInfo
from .plan import Bridge, Export, Import, Plan, Rewrap, RouteChoice, WarmRoute, dotted_name
from .registry import Registry


class Hub(Protocol):
    """What routes need of the hub above them (`interop.engine.Hub`): its adapters, the
    read-only memory it shared, and its full path for the calls a route gives back."""

    registry: Registry
    read_only: Any

    def convert(self, x: Any, to: Any, copy: Any, device: Any, stream: Any) -> Any: ...


def _then(importer: Callable[[Any], Any], then: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`importer`, its result passed through `then`: one function for the route to call."""

    def import_(source: Any) -> Any:
        return then(importer(source))

    return import_


#: the bridge a route runs before an exchange import of a capsule its plan shares legacy
EXCHANGE_BRIDGE = Bridge("core", "the C exchange API imports versioned capsules", versioned=True)


def exchange_route(
    kind: type,
    target: Adapter,
    info: TensorInfo,
    export: Export | None,
    import_: Import,
    bridge: Bridge | None,
) -> tuple[type | None, type | None, Bridge | None]:
    """(export_api, import_api, rebox) of a route (`Lesson`), from its plan's steps: the type
    whose C exchange API exports (the Export step's word, for the versioned capsule the plan
    shares), the one whose API imports (the Import step's, for a capsule it takes versioned:
    never after the plan's bridge into a legacy one), and the bridge the route runs before
    the import: the plan's, or into a versioned capsule for the exchange import of a legacy
    one. Worked out here once for both twins; neither looks an exchange API up by itself."""
    versioned = info.version is not None
    export_api = kind if export is not None and export.exchange_api and versioned else None
    legacy = bridge is not None and not bridge.versioned
    import_api = target.tensor_types()[0] if import_.exchange_api and not legacy else None
    rebox = bridge
    if import_api is not None and bridge is None and not versioned:
        rebox = EXCHANGE_BRIDGE
    return export_api, import_api, rebox


class Routes:
    """Routes by source type, then by `to` as the caller wrote it (a name, module or adapter)."""

    def __init__(self, hub: Hub, compiled: bool | None = None) -> None:
        self.hub = hub
        #: the twin that builds and runs this hub's routes (`compiled`: see `fastpath.choose`)
        self.fast: FastPath = choose(compiled)
        #: type -> {to: route}; only adapters' own tensor types (never subclasses, which may
        #: be made dynamically), so the table stays as small as the set of frameworks
        self.table: dict[type, dict[Any, Route]] = {}
        self._known: dict[tuple[type, Any], dict[Hashable, Any]] = {}
        #: (source type, to) -> the lesson its route was built from: the first share's, or
        #: while it has none, the first copy's (every key agrees with it: FastPath.shape)
        self._built: dict[tuple[type, Any], Lesson] = {}
        #: (source type, to) whose route serves copies (`FastPath.build(..., copies=True)`)
        self._copying: set[tuple[type, Any]] = set()
        #: (source type, to) whose route an adapter's hook failed to make: not tried again
        self._disabled: set[tuple[type, Any]] = set()

    @property
    def compiled(self) -> bool:
        """Whether this hub's routes are the compiled twin's."""
        return self.fast.compiled

    def explain(
        self, x: Any, to: Any, copy: Any, device: Any, stream: Any, plan: Plan
    ) -> WarmRoute | None:
        """What the warm path does with `convert(x, to)`, for `explain` to say: the route that
        takes the call, or whether this call teaches one (the plan's choice, and whether the
        source's adapter keys this tensor), in a user's words with the functions' names as
        its `detail`. None for calls routes never serve (device=, stream=, copy=True) and for
        copies the plan does not remember."""
        if device is not None or stream is not None or copy not in (None, False):
            return None
        taken = self._taking(x, to, plan.source)
        if taken is not None or plan.identity or not (plan.zero_copy or plan.route.remembered):
            return taken

        def said(words: str, detail: str = "") -> WarmRoute:
            return WarmRoute(plan.source, words, detail=detail)

        if not plan.route.remembered:
            return said(str(plan.route))
        kind = type(x)
        adapter = self.hub.registry.detect(x)
        try:
            if adapter is None or kind not in adapter.tensor_types():
                key = None  # (a subclass: routes are kept for the adapters' own types)
            else:
                align = next(s for s in plan.steps if isinstance(s, Import)).alignment
                key = self.fast.tensor_key(x, adapter, plan.route.exporter, align)
        except Exception:
            key = None
        if key is None or key == -1:
            return said(
                "convert plans every call like this one: its adapter keeps this tensor off "
                "remembered routes (a subclass, a view, or a state its fingerprint omits)"
            )
        if (kind, to) in self._disabled:
            return said(
                "convert plans every call like this one: a hook failed as its route was made"
            )
        built = self._built.get((kind, to))
        info = plan.tensor
        if plan.route.copier is not None and built is not None and info is not None:
            if self._copy_shape(plan.route.exporter, info) != self._copy_shape(
                built.exporter, built.info
            ):
                return said(
                    "convert plans every call like this one: the route remembered for this "
                    "pair keys tensors through another export than this one takes"
                )
        return said(plan.route.words, plan.route.names)

    def _taking(self, x: Any, to: Any, source: str) -> WarmRoute | None:
        """The route remembered for this very tensor, described; None if there is none."""
        kind = type(x)
        try:
            route = self.table[kind][to]
            known = self._known[(kind, to)]
            built = self._built[(kind, to)]
        except (KeyError, TypeError):
            return None
        try:
            adapter = self.hub.registry.detect(x)
            exporter, align = built.exporter, built.import_.alignment
            key = None if adapter is None else self.fast.tensor_key(x, adapter, exporter, align)
            entry = known.get(key)
        except Exception:
            entry = None
        if entry is None:
            return None
        taking = (
            f"convert takes the route remembered for {dotted_name(kind)} -> {to!r} "
            f"({self.fast.label})"
        )
        replay = self.fast.replay_of(entry)
        if replay is not None:
            return WarmRoute(
                source,
                f"{taking}: the source is copied, and the copy converts through its own "
                "route, replaying this plan without planning again",
                detail=f"{dotted_name(replay.copier)} copies",  # type: ignore[attr-defined]
            )
        export, import_ = self.fast.endpoints(route, entry, exporter, kind)
        return WarmRoute(
            source,
            f"{taking}, replaying this plan without planning again",
            detail=f"{export} -> {import_}",
        )

    def clear(self) -> None:
        self.table.clear()
        self._known.clear()
        self._built.clear()
        self._copying.clear()
        self._disabled.clear()

    def learn(
        self,
        x: Any,
        to: Any,
        adapter: Adapter,
        target: Adapter,
        tcaps: Capabilities,
        info: TensorInfo,
        choice: RouteChoice,
        import_: Import,
        capsule_key: int = -1,
        bridge: Bridge | None = None,
        rewrap: Rewrap | None = None,
        export: Export | None = None,
    ) -> None:
        """Remember the route the plan chose (`choice`: its exporter and importer) for tensors
        like `x` (`_learn`); never for an Adapter instance passed as `to` that is not the
        registered one. A failure here (an adapter hook the route calls) disables the route
        for (type of `x`, `to`) until the routes are cleared: the conversion that teaches it
        has moved the data, and its result stands."""
        key = self._key(x, to)
        if key is None:
            return
        try:
            steps = (import_, capsule_key, bridge, rewrap, export)
            self._learn(x, to, adapter, target, tcaps, info, choice, *steps)
        except Exception:
            self._disabled.add(key)
            self.table.get(key[0], {}).pop(to, None)
            self._known.pop(key, None)
            self._built.pop(key, None)
            self._copying.discard(key)

    def learn_same(self, x: Any, to: Any, adapter: Adapter) -> None:
        """Remember that tensors of `x`'s type converted to `to`, their own framework, are
        returned as they are (`copy=None` or False): the full path plans nothing else for
        them, and costs microseconds to find that out (keyed as `learn` keys: the adapter's
        own types, `to` as the registry gives it)."""
        key = self._key(x, to)
        try:
            if key is not None and key[0] in adapter.tensor_types():
                self.table.setdefault(key[0], {})[to] = _same
        except Exception:
            return  # an adapter hook failing: the full path serves it

    def _key(self, x: Any, to: Any) -> tuple[type, Any] | None:
        """(type of `x`, `to`), the key a route is remembered under, or None where none may
        be: an unhashable `to` (never looked up), an Adapter instance that is not the
        registered one (a fresh one per call would teach a route per call, each kept for
        good: routes are keyed by what the registry gives out only), a disabled pair."""
        try:
            key = (type(x), to)
            hash(key)
            if isinstance(to, Adapter) and self.hub.registry.get(to.name) is not to:
                return None
        except Exception:
            return None  # (also an adapter nowhere registered)
        return None if key in self._disabled else key

    def _learn(
        self,
        x: Any,
        to: Any,
        adapter: Adapter,
        target: Adapter,
        tcaps: Capabilities,
        info: TensorInfo,
        choice: RouteChoice,
        import_: Import,
        capsule_key: int = -1,
        bridge: Bridge | None = None,
        rewrap: Rewrap | None = None,
        export: Export | None = None,
    ) -> None:
        """Learn the route: key it, and have the fast path build what replays the plan.
        `export`, `import_`, `bridge`, `rewrap`: the plan's steps, which the route runs as the
        full path does (through the C exchange API where they say: `exchange_route`);
        `capsule_key`: the fast path's key of the capsule that was shared. Only keys are
        looked at here (the adapter's own type, not a subclass; a fingerprint): the plan
        decided."""
        kind = type(x)
        if kind not in adapter.tensor_types():
            return  # (subclasses may be made dynamically: the table stays small)
        try:
            hash(to)
            align = import_.alignment
            fingerprint = self.fast.lesson_key(x, adapter, capsule_key, align, info.alignment)
        except Exception:
            return
        if fingerprint is None or fingerprint == -1:
            return
        exporter, importer = choice.exporter, choice.importer
        replay = None if choice.copier is None else self.replay(choice.copier, to)
        if exporter is None or (importer is None and replay is None):
            return  # (a plan that chose no route: never passed in)
        if import_.writable and importer is not None:  # the plan's Import, as Conversion runs it
            importer = _then(importer, target.make_writable)
        guarded = choice.guarded
        ranges: tuple[dict[int, tuple[int, int]], ...] = (
            (self.hub.read_only.entries,) if guarded else ()
        )
        apis = exchange_route(kind, target, info, export, import_, bridge)
        lesson = Lesson(
            self.hub, kind, to, adapter, target, tcaps, info, exporter, importer, import_, bridge,
            guarded, ranges, replay, rewrap, *apis,
        )  # fmt: skip
        key = (kind, to)
        known = self._known.setdefault(key, {})
        built = self._built.get(key)
        fast = self.fast
        # copying keys are found only through the export they were read off (compiled)
        elsewhere = built is not None and (
            self._copy_shape(built.exporter, built.info) != self._copy_shape(exporter, info)
        )
        if replay is None and built is not None and built.replay is None:
            if fast.shape(built) != fast.shape(lesson):
                return  # it exports, bridges or imports unlike the route: the full path serves it
        elif replay is None:  # the first share: the route is built from it
            if elsewhere:  # the copying keys are read off another export than the share's
                for stale in [k for k, e in known.items() if fast.replay_of(e) is not None]:
                    del known[stale]
            self._build(key, known, lesson)
        elif elsewhere:
            return  # keyed through another export than the route's: the full path serves it
        elif built is None or key not in self._copying:
            self._copying.add(key)
            self._build(key, known, built or lesson)
        known[fingerprint] = fast.entry(lesson, self.table[kind][to])

    def _copy_shape(self, exporter: Any, info: TensorInfo) -> Hashable:
        """What copying keys read through `exporter` (of a tensor like `info`) must share with
        the route's own export to be found (`FastPath.copy_shape`)."""
        return self.fast.copy_shape(exporter, info.version is not None)

    def _build(self, key: tuple[type, Any], known: dict[Hashable, Any], lesson: Lesson) -> None:
        """(Re)build the route for `key` over `known` from `lesson`, serving copies where any
        key's plan copies."""
        self._built[key] = lesson
        route = self.fast.build(lesson, known, key in self._copying)
        self.table.setdefault(key[0], {})[key[1]] = route

    def replay(self, copier: Callable[[Any], Any], to: Any) -> Callable[[Any, Any], Any]:
        """A copying plan's route: `copier` (the plan's copy: the source's own, or NumPy's of
        its memory), then the copy converted as any fresh tensor is, through its route (taken
        with copy=False: a route never copies twice) or the full path. None for copy=False,
        which the full path refuses."""
        table, full = self.table, self.hub.convert

        def replay(x: Any, copy: Any) -> Any:
            if copy is False:
                return None
            fresh = copier(x)
            try:
                route = table[type(fresh)][to]
            except (KeyError, TypeError):
                route = None
            result = None if route is None else route(fresh, False)
            return full(fresh, to, None, None, None) if result is None else result

        replay.copier = copier  # type: ignore[attr-defined]  # (for explain)
        return replay


def _same(x: Any, copy: Any) -> Any:
    """The route of a tensor to its own framework: itself (routes serve copy=None and False
    only)."""
    return x
