"""What a twin of the warm path is: the `FastPath` interface, and the `Lesson` a plan that
chose a route gives it to build that route from."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol

from ..adapter import Adapter, Capabilities
from ..info import TensorInfo
from ..plan import Bridge, Import, Rewrap

#: a route: (x, copy) -> the converted tensor, or None where the full path must decide
Route = Callable[[Any, Any], Any]


class Lesson(NamedTuple):
    """What a plan that chose a route decided, for the fast path to replay: its exporter and
    importer, its Import, Bridge and Rewrap steps, and the facts the route's checks depend
    on. A twin builds its route from these steps and decides nothing itself."""

    hub: Any
    kind: type
    to: Any
    adapter: Adapter
    target: Adapter
    tcaps: Capabilities
    info: TensorInfo
    exporter: Callable[[Any], Any]
    #: the plan's Import step, made writable where it says (None for a copying lesson)
    importer: Callable[[Any], Any] | None
    import_: Import
    bridge: Bridge | None
    guarded: bool
    ranges: tuple[dict[int, tuple[int, int]], ...]
    #: a copying plan's route (`Routes.replay`): (x, copy) -> the copy converted, or None;
    #: the exporter then only keys the tensor
    replay: Callable[[Any, Any], Any] | None = None
    #: the plan's deferring re-wrap (Capabilities.frees_under_lock), None where it has none
    #: (and for a copying lesson: the copy's own route re-wraps it)
    rewrap: Rewrap | None = None
    #: the source type whose C exchange API exports (`interop.routes.exchange_route`, from
    #: the plan's Export step), None: the exporter does
    export_api: type | None = None
    #: the target type whose C exchange API imports (from the Import step), None: the importer
    import_api: type | None = None
    #: the bridge a route runs: the plan's, or into a versioned capsule for `import_api`
    #: where the plan shares a legacy one (the pure route's exchange import boxes it itself)
    rebox: Bridge | None = None


class FastPath(Protocol):
    """What routes need of a twin. `shape`: what every key of one route must agree on (a
    lesson whose shape differs is not remembered: the full path serves it); `build`: the
    route for (source type, target), over `known` (key -> `entry`), which grows as keys are
    learned (`entry` is given the route it adds a key to; a copying lesson's entry holds its
    replay, which `replay_of` gives back, and is served only by a route built with `copies`,
    from a lesson of the same `copy_shape` (of its exporter and capsule kind));
    `lesson_key`: the key a conversion teaches (`capsule_key`: the capsule shared, whose
    address is `alignment`-byte aligned); `tensor_key`: the key of a tensor, to say whether a
    route takes it. Keys stand for what `interop.plan.KEYS_OMIT` says, in both twins: `align`
    is the alignment the target shares (the plan's `Import.alignment`)."""

    compiled: bool
    label: str

    def front(self, table: dict[type, dict[Any, Route]], slow: Callable[..., Any]) -> Any: ...

    def capsule_key(self, capsule: Any) -> int: ...

    def lesson_key(
        self, x: Any, adapter: Adapter, capsule_key: int, align: int, alignment: int
    ) -> Hashable | None: ...

    def tensor_key(
        self, x: Any, adapter: Adapter, exporter: Any, align: int
    ) -> Hashable | None: ...

    def shape(self, lesson: Lesson) -> Hashable: ...

    def build(self, lesson: Lesson, known: dict[Hashable, Any], copies: bool) -> Route: ...

    def entry(self, lesson: Lesson, route: Route) -> Any: ...

    def replay_of(self, entry: Any) -> Callable[[Any, Any], Any] | None: ...

    def copy_shape(self, exporter: Any, versioned: bool) -> Hashable: ...

    def endpoints(self, route: Route, entry: Any, exporter: Any, kind: type) -> tuple[str, str]: ...
