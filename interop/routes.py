"""The fast path: routes remembered from plain shares, taken without planning again.

After a conversion whose plan was "export, share, import" with nothing decided per call, the
hub remembers a route for (source type, target) with the set of fingerprints that allowed it.
A later call whose fingerprint is in the set goes straight through; anything else (an unknown
fingerprint, a failure, a capsule that fails the route's check) takes the full path, which
plans, raises the typed errors, and may teach the route a new fingerprint.

Two kinds of fingerprint, each determining every fact the plan depends on:
- pure Python: the source adapter's `fingerprint(x)`, from the tensor's own attributes, before
  export; the data address (alignment) and device are checked on the capsule when the target
  needs them;
- compiled (`interop._speedups`, when built): computed in C from the capsule itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from typing import Any, Protocol

from . import capsule as cap
from . import readonly
from .adapter import WRITABLE, Adapter, Capabilities
from .capsule import Held
from .info import TensorInfo
from .plan import Bridge, Import, Plan, RouteChoice, dotted_name
from .registry import Registry
from .speedups import SPEEDUPS


class Hub(Protocol):
    """What routes need of the hub above them (`interop.engine.Hub`): its adapters, the
    read-only memory it shared, and its full path for the calls a route gives back."""

    registry: Registry
    read_only: Any

    def convert(self, x: Any, to: Any, copy: Any, device: Any, stream: Any) -> Any: ...


Route = Callable[[Any, Any], Any]


# The pure route's source, one line per step, each under the condition that needs it: a
# route is written with only the steps its (source, target) needs, so a plain share pays for
# no test it does not make (each costs 10-80 ns of a conversion that must stay within 1 us of
# the direct call). Conditions: ranges (remembered memory: the full path decides), guarded
# (the copy policy matters), address (the adapter's fast address, checked for alignment),
# rebox (the plan's bridge), where (alignment and device read off the capsule), defer (the
# plan's deferring re-wrap, which may claim the address: Paddle's), adopt (that re-wrap and
# the import in one, through the target's exchange API), held (a consumer of objects only),
# bare (capsules without a destructor, `Adapter.bare_exporter`: released here if not taken).
_ROUTE: tuple[tuple[str, str], ...] = (
    ("", "def route(x, copy):"),
    ("queue", "    if pending:  # releases deferred out of Paddle's lock: none piles up"),
    ("queue", "        drain()"),
    ("adopt", "    if not import_ok():  # Paddle's static mode: from_dlpack makes another type"),
    ("adopt", "        return None"),
    ("ranges", "    if remembered or also:"),
    ("ranges", "        return None"),
    ("guarded", "    if (block_policy() or readonly.process_policy) is not share:"),
    ("guarded", "        return None"),
    ("", "    try:"),
    ("", "        export, import_ = known[fingerprint(x)]"),
    ("address", "        if address(x) & mask:"),
    ("address", "            return None"),
    ("", "        capsule = export(x)"),
    ("rebox", "        capsule = rebox(capsule)"),
    ("where", "        kind, _, first = where(capsule, versioned)"),
    ("", "    except Exception:"),
    ("", "        return None  # an unknown fingerprint, or a failure: the full path decides"),
    ("where", "    if kind != 1 or first & mask:  # not a CPU buffer aligned as the target needs"),
    ("where", "        return hub.convert(x, to, copy, None, None, capsule)"),
    ("", "    try:"),
    ("defer", "        capsule = defer(capsule)"),
    ("defer", "        if capsule is None:  # an address Paddle holds: the full path copies"),
    ("defer", "            return None"),
    ("adopt", "        return adopt(capsule)  # None where Paddle holds the address: a copy"),
    ("held", "        return import_(Held(capsule))"),
    ("-held", "        return import_(capsule)"),
    ("", "    except Exception:"),
    ("bare", "        unconsumed(capsule)  # no destructor would release what it did not take"),
    ("", "        return None"),
    ("bare", "    except BaseException:"),
    ("bare", "        unconsumed(capsule)"),
    ("bare", "        raise"),
)


def _pure_route(
    hub: Hub,
    to: Any,
    fingerprint: Callable[[Any], Hashable | None],
    known: dict[Hashable, tuple[Callable[[Any], Any], Callable[[Any], Any]]],
    versioned: bool,
    as_object: bool,
    align: int,
    guarded: bool,
    address: Callable[[Any], int] | None,
    ranges: tuple[dict[int, tuple[int, int]], ...],
    rebox: Callable[[Any], Any] | None = None,
    defer: Callable[[Any], Any] | None = None,
    adopt: Callable[[Any], Any] | None = None,
    import_ok: Callable[[], Any] | None = None,
    bare: bool = False,
) -> Route:
    """A route: one function per (source type, target), written with only the checks it needs.

    `guarded`: the immutable policy matters; `ranges`: while any of these remembers memory,
    the full path decides (it knows which memory is read-only); `rebox`: the plan's bridge
    into the other capsule kind (`versioned` is then the bridged kind); `defer`: the plan's
    deferring re-wrap (None where it claims an address a live import holds); `adopt`: that
    re-wrap and the import in one (`capsule.deferring_import`), instead of both, where
    `import_ok()` (the target's `import_guard`) says it may run now; `bare`: the exports may
    be capsules without a destructor, which only the importer takes (`bare_route`)."""
    mask = align - 1
    # at most two dicts (read-only memory, Paddle's): tested as locals, no call per conversion
    assert len(ranges) <= 2
    remembered, also = (*ranges, {}, {})[:2]
    address = address if mask else None  # checked on the capsule where the adapter has none
    steps = {
        "": True,
        "ranges": bool(ranges),
        "guarded": guarded,
        "address": address is not None,
        "rebox": rebox is not None,
        "queue": defer is not None or adopt is not None,
        "defer": defer is not None,
        "where": bool(mask) and address is None,
        "adopt": adopt is not None,
        "held": as_object and adopt is None,
        "-held": not as_object and adopt is None,
        "bare": bare,
    }
    assert not bare or bare_route(rebox, defer, adopt, steps["where"])
    source = "\n".join(line for step, line in _ROUTE if steps[step])
    scope = {
        "hub": hub,
        "to": to,
        "fingerprint": fingerprint,
        "known": known,
        "versioned": versioned,
        "mask": mask,
        "address": address,
        "remembered": remembered,
        "also": also,
        "block_policy": readonly.block_policy,
        "readonly": readonly,
        "share": readonly.SHARE,
        "rebox": rebox,
        "defer": defer,
        "adopt": adopt,
        "import_ok": import_ok or (lambda: True),
        # the queue the re-wrap fills: the accelerator's (where built, its drain costs less
        # than a test), else the Python one (tested first: a call costs more)
        "pending": True if SPEEDUPS is not None else cap.pending_releases,
        "drain": cap.drain_deferred if SPEEDUPS is None else SPEEDUPS.drain_deferred,
        "where": cap.where,
        "Held": Held,
        "unconsumed": cap.release_unconsumed,
    }
    exec(compile(source, f"<interop route to {to!r}>", "exec"), scope)
    route: Route = scope["route"]
    route.source = source  # type: ignore[attr-defined]  # what it runs, for a reader
    return route


def bare_route(rebox: Any, defer: Any, adopt: Any, where: bool) -> bool:
    """Whether a pure route may export capsules without a destructor: it hands them straight
    to the importer (and releases them where that fails), never to a bridge, a re-wrap or the
    full path, which would drop them unreleased."""
    return rebox is None and defer is None and adopt is None and not where


def _then(importer: Callable[[Any], Any], then: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`importer`, its result passed through `then`: one function for the route to call."""

    def import_(source: Any) -> Any:
        return then(importer(source))

    return import_


class Routes:
    """Routes by source type, then by `to` as the caller wrote it (a name, module or adapter)."""

    def __init__(self, hub: Hub, compiled: bool | None = None) -> None:
        self.hub = hub
        #: type -> {to: route}; only adapters' own tensor types (never subclasses, which may
        #: be made dynamically), so the table stays as small as the set of frameworks
        self.table: dict[type, dict[Any, Route]] = {}
        self._known: dict[tuple[type, Any], dict[Hashable, Any]] = {}
        self.compiled = SPEEDUPS is not None if compiled is None else compiled and bool(SPEEDUPS)
        self._exporters: dict[tuple[type, Any], Any] = {}
        #: (source type, to) whose route an adapter's hook failed to make: not tried again
        self._disabled: set[tuple[type, Any]] = set()

    def explain(
        self, x: Any, to: Any, copy: Any, device: Any, stream: Any, plan: Plan
    ) -> str | None:
        """What the warm path does with `convert(x, to)`, for `explain` to say: the route that
        takes the call, or, for a share, whether this call teaches one (the plan's choice,
        and whether the source's adapter keys this tensor). None for calls routes never
        serve (device=, stream=, copy=True) and for copies."""
        if device is not None or stream is not None or copy not in (None, False):
            return None
        taken = self._taking(x, to)
        if taken is not None or not plan.zero_copy or plan.identity:
            return taken
        if not plan.route.remembered:
            return str(plan.route)
        kind = type(x)
        adapter = self.hub.registry.detect(x)
        try:
            if adapter is None or kind not in adapter.tensor_types():
                key = None  # (a subclass: routes are kept for the adapters' own types)
            elif self.compiled:
                exporter = plan.route.exporter
                key = SPEEDUPS.fingerprint(exporter(x)) if exporter else None  # freed unused
            else:
                key = adapter.fingerprint(x)
        except Exception:
            key = None
        if key is None or key == -1:
            return (
                "convert plans every call like this one: its adapter keeps this tensor off "
                "remembered routes (a subclass, a view, or a state its fingerprint omits)"
            )
        if (kind, to) in self._disabled:
            return "convert plans every call like this one: a hook failed as its route was made"
        return str(plan.route)

    def _taking(self, x: Any, to: Any) -> str | None:
        """The route remembered for this very tensor, described; None if there is none."""
        kind = type(x)
        try:
            route = self.table[kind][to]
            known = self._known[(kind, to)]
        except (KeyError, TypeError):
            return None
        where = f"{dotted_name(kind)} -> {to!r}"
        try:
            if self.compiled:
                exporter = self._exporters[(kind, to)][0]
                key = SPEEDUPS.fingerprint(exporter(x))  # read, not consumed: freed unused
                by_api = getattr(route, "exchange_api", (False, False))
            else:
                adapter = self.hub.registry.detect(x)
                key = adapter.fingerprint(x) if adapter is not None else None
                by_api = (False, False)
            entry = known.get(key)
        except Exception:
            entry = None
        if entry is None:
            return None
        if self.compiled:
            importer = entry
        else:
            exporter, importer = entry
        api = "__dlpack_c_exchange_api__"
        export = f"{dotted_name(kind)}.{api}" if by_api[0] else dotted_name(exporter)
        import_ = f"the target type's {api}" if by_api[1] else dotted_name(importer)
        kind_of = "compiled" if self.compiled else "pure Python"
        return (
            f"convert takes the route remembered for {where} ({kind_of}): {export} -> "
            f"{import_}, replaying this plan without planning again"
        )

    def clear(self) -> None:
        self.table.clear()
        self._known.clear()
        self._exporters.clear()
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
    ) -> None:
        """Remember the route the plan chose (`choice`: its exporter and importer) for tensors
        like `x` (`_learn`); never for an Adapter instance passed as `to` that is not the
        registered one. A failure here (an adapter hook the route calls) disables the route
        for (type of `x`, `to`) until the routes are cleared: the conversion that teaches it
        has moved the data, and its result stands."""
        try:
            key = (type(x), to)
            hash(key)
            if isinstance(to, Adapter) and self.hub.registry.get(to.name) is not to:
                # an ad-hoc instance (a fresh one per call would teach a route per call, each
                # kept for good): routes are keyed by what the registry gives out only
                return
        except Exception:
            return  # an unhashable `to` (never looked up), or an adapter nowhere registered
        if key in self._disabled:
            return
        try:
            self._learn(x, to, adapter, target, tcaps, info, choice, import_, capsule_key, bridge)
        except Exception:
            self._disabled.add(key)
            self.table.get(key[0], {}).pop(to, None)
            self._known.pop(key, None)
            self._exporters.pop(key, None)

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
    ) -> None:
        """Learn the route: key it, and build what replays the plan. `import_`, `bridge`: the
        plan's steps, which the route runs as the full path does; `capsule_key`: the compiled
        fingerprint of the capsule that was shared (compiled mode). Only keys are looked at
        here (the adapter's own type, not a subclass; a fingerprint): the plan decided."""
        kind = type(x)
        as_object = import_.as_object
        if kind not in adapter.tensor_types():
            return  # (subclasses may be made dynamically: the table stays small)
        try:
            hash(to)
            fingerprint = capsule_key if self.compiled else adapter.fingerprint(x)
        except Exception:
            return
        if fingerprint is None or fingerprint == -1:
            return
        scaps = adapter.capabilities()
        versioned = info.version is not None
        writable = tcaps.import_access == WRITABLE
        exporter, importer = choice.exporter, choice.importer
        if exporter is None or importer is None:
            return  # (a plan that chose no route: never passed in)
        if import_.writable:  # the plan's Import step, as Conversion.import_ runs it
            importer = _then(importer, target.make_writable)
        key = (kind, to)
        known = self._known.get(key)
        guarded = bool(scaps.immutable and writable)
        ranges: tuple[dict[int, tuple[int, int]], ...] = (
            (self.hub.read_only.entries,) if guarded else ()
        )
        if self.compiled:
            rewrap = None if bridge is None else (bridge.versioned, bridge.read_only)
            if known is None:
                known = self._known[key] = {}
                self._exporters[key] = (exporter, rewrap, import_.writable)
                self.table.setdefault(kind, {})[to] = SPEEDUPS.Route(
                    known=known,
                    exporter=exporter,
                    guards=adapter.route_guards,
                    ranges=ranges,
                    policy=readonly.current_policy,
                    share=readonly.SHARE,
                    source=kind,
                    target=target.tensor_types()[0],
                    versioned=versioned,
                    as_object=as_object,
                    guarded=guarded,
                    defer=tcaps.frees_under_lock,
                    claim=tcaps.one_import_per_address,
                    import_guard=target.import_guard(),
                    bridge=-1 if bridge is None else int(bridge.versioned),
                    bridge_read_only=bool(bridge and bridge.read_only),
                )
            elif self._exporters[key] != (exporter, rewrap, import_.writable):
                return  # it exports (MXNet's booleans), bridges or imports unlike the route
            known[fingerprint] = importer
            return
        rebox = None
        if bridge is not None:  # the plan's Bridge step, as Conversion.bridge runs it
            rebox = partial(
                cap.bridge,
                to_versioned=bridge.versioned,
                read_only=bridge.read_only or info.read_only,
                allow_read_only=not writable or tcaps.legacy_import_read_only,
            )
        # fingerprints of one route must agree on what the plan does besides export and
        # import: its bridge (legacy <-> versioned) and whether the result is made writable
        shape = (bridge, import_.writable)
        if known is not None and self._exporters[key] != (None, shape):
            return  # it bridges or imports unlike the route (read-only, say): the full path
        defer = adopt = None
        shared_kind = versioned if bridge is None else bridge.versioned
        if tcaps.frees_under_lock:  # the plan's deferring re-wrap, as Conversion.rewrap runs it
            # without the accelerator, through the target's exchange API as the compiled route
            # does (3.6 us less for Paddle); with it, its re-wrap, whose release takes no GIL
            exchange = None
            if SPEEDUPS is None and not as_object:
                exchange = cap.exchange_import(target.tensor_types()[0])
            if exchange is not None:
                adopt = cap.deferring_import(tcaps.one_import_per_address, shared_kind, exchange)
            else:
                defer = cap.deferring(tcaps.one_import_per_address)
        align = max(tcaps.alignment_on("cpu")[0], 1)  # routes carry host buffers only
        address = (
            None if type(adapter).fast_address is Adapter.fast_address else adapter.fast_address
        )
        # decided per (source type, target), as the route's source is: a bare route takes
        # dressed capsules too (the dtypes the adapter has no bare export for)
        bare = type(adapter).bare_exporter is not Adapter.bare_exporter and bare_route(
            rebox, defer, adopt, align > 1 and address is None
        )
        if bare:  # the same capsule without the framework's Python destructor (MXNet's)
            exporter = adapter.bare_exporter(versioned, tcaps.writes, info.dtype) or exporter
        if known is None:
            known = self._known[key] = {}
            self._exporters[key] = (None, shape)
            self.table.setdefault(kind, {})[to] = _pure_route(
                self.hub,
                to,
                adapter.fingerprint,
                known,
                shared_kind,
                as_object,
                align,
                guarded,
                address,
                ranges,
                rebox,
                defer,
                adopt,
                target.import_guard(),
                bare,
            )
        known[fingerprint] = (exporter, importer)
