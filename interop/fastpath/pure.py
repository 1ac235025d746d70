"""The pure-Python twin of the warm path: routes written in Python, keyed by the source
adapter's `fingerprint(x)` before export, with whether the address is as aligned as the target
shares (read by the adapter's `fast_address`); where the adapter has none, a route checks the
alignment on the capsule, and keys only aligned tensors."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from .. import capsule as cap
from .. import readonly
from ..adapter import Adapter
from ..capsule import Held
from ..plan import Import, dotted_name
from ..roles import CapsuleBoxes, FastPath
from .interface import Lesson, Route

# The pure route's source, one line per step, each under the condition that needs it: a
# route is written with only the steps its (source, target) needs, so a plain share pays for
# no test it does not make (each costs 10-80 ns of a conversion that must stay within 1 us of
# the direct call). Conditions: ranges (remembered memory: the full path decides), guarded
# (the copy policy matters), ndim (the target's bounds on dimensions, which keys do not carry:
# the full path checks them beside the plan), address (the adapter's fast address, checked for
# alignment), rebox (the plan's bridge), where (alignment and device read off the capsule),
# defer (the plan's deferring re-wrap, which may claim the address: Paddle's), adopt (that
# re-wrap and the import in one, through the target's exchange API), held (a consumer of
# objects only), bare (capsules without a destructor, `Adapter.bare_exporter`: released here
# if not taken), copies (keys whose plan copies: their entry is (replay, None),
# `Routes.replay`).
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
    ("-address", "        export, import_ = known[fingerprint(x)]"),
    ("address", "        key = fingerprint(x)"),
    ("address", "        if address(x) & mask:  # less aligned than the target shares"),
    ("address", "            key = (key, unaligned)"),
    ("address", "        export, import_ = known[key]"),
    ("ndim", "        if not low <= len(x.shape) <= high:  # the full path refuses it"),
    ("ndim", "            return None"),
    ("copies", "        if import_ is None:  # the plan copies: the copy converts on its route"),
    ("copies", "            return export(x, copy)"),
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


def pure_route(
    hub: Any,
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
    copies: bool = False,
    ndims: tuple[int, int] | None = None,
) -> Route:
    """A route: one function per (source type, target), written with only the checks it needs.

    `guarded`: the immutable policy matters; `ranges`: while any of these remembers memory,
    the full path decides (it knows which memory is read-only); `rebox`: the plan's bridge
    into the other capsule kind (`versioned` is then the bridged kind); `defer`: the plan's
    deferring re-wrap (None where it claims an address a live import holds); `adopt`: that
    re-wrap and the import in one (`capsule.deferring_import`), instead of both, where
    `import_ok()` (the target's `import_guard`) says it may run now; `bare`: the exports may
    be capsules without a destructor, which only the importer takes (`bare_route`);
    `copies`: some keys' plans copy (their entries replay the copy); `ndims`: the target's
    (fewest, most) dimensions, where it declares bounds."""
    mask = align - 1
    # at most two dicts (read-only memory, Paddle's): tested as locals, no call per conversion
    assert len(ranges) <= 2
    remembered, also = (*ranges, {}, {})[:2]
    address = address if mask else None  # checked on the capsule where the adapter has none
    steps = _conditions(
        as_object, guarded, bool(mask), address, bool(ranges), rebox, defer, adopt, bare, copies
    )
    steps["ndim"] = ndims is not None
    assert not bare or bare_route(rebox, defer, adopt, steps["where"])
    low, high = ndims or (0, 0)
    source = "\n".join(line for step, line in _ROUTE if steps[step])
    scope = {
        "hub": hub,
        "to": to,
        "fingerprint": fingerprint,
        "known": known,
        "versioned": versioned,
        "mask": mask,
        "low": low,
        "high": high,
        "address": address,
        "unaligned": UNALIGNED,
        "remembered": remembered,
        "also": also,
        "block_policy": readonly.block_policy,
        "readonly": readonly,
        "share": readonly.SHARE,
        "rebox": rebox,
        "defer": defer,
        "adopt": adopt,
        "import_ok": import_ok or (lambda: True),
        # the queue the re-wrap fills, tested where a test costs less than a drain
        "pending": cap.RELEASES.queued,
        "drain": cap.RELEASES.drain,
        "where": cap.where,
        "Held": Held,
        "unconsumed": cap.release_unconsumed,
    }
    exec(compile(source, f"<interop route to {to!r}>", "exec"), scope)
    route: Route = scope["route"]
    route.source = source  # type: ignore[attr-defined]  # what it runs, for a reader
    route.bare = bare  # type: ignore[attr-defined]  # (what each key's exporter must match)
    return route


def _conditions(
    as_object: bool,
    guarded: bool,
    aligns: bool,
    address: Any,
    ranges: bool,
    rebox: Any,
    defer: Any,
    adopt: Any,
    bare: bool,
    copies: bool,
) -> dict[str, bool]:
    """Which of `_ROUTE`'s conditions hold for a route (its lines under the others are left
    out); `aligns`: the target needs more than byte alignment."""
    return {
        "": True,
        "ranges": ranges,
        "guarded": guarded,
        "address": address is not None,
        "-address": address is None,
        "rebox": rebox is not None,
        "queue": defer is not None or adopt is not None,
        "defer": defer is not None,
        "where": aligns and address is None,
        "adopt": adopt is not None,
        "held": as_object and adopt is None,
        "-held": not as_object and adopt is None,
        "bare": bare,
        "copies": copies,
    }


def bare_route(rebox: Any, defer: Any, adopt: Any, where: bool) -> bool:
    """Whether a pure route may export capsules without a destructor: it hands them straight
    to the importer (and releases them where that fails), never to a bridge, a re-wrap or the
    full path, which would drop them unreleased."""
    return rebox is None and defer is None and adopt is None and not where


def front(table: dict[type, dict[Any, Route]], slow: Callable[..., Any]) -> Any:
    """`convert`: the route remembered for (type of x, to) first, then `slow`, the full path."""

    def convert(
        x: Any,
        to: Any,
        *,
        copy: Any = None,
        device: Any = None,
        stream: Any = None,
        dtypes: Any = None,
    ) -> Any:
        if dtypes is not None:  # a cast is never a remembered route
            return slow(x, to, copy, device, stream, dtypes)
        if device is None and stream is None and (copy is None or copy is False):
            try:  # subscripts, not .get(): a method call each costs more than a rare miss
                route = table[type(x)][to]
            except (KeyError, TypeError):  # no route, or an unhashable `to`: the full path
                pass
            else:
                result = route(x, copy)
                if result is not None:
                    return result
        return slow(x, to, copy, device, stream)

    return convert


class PureFastPath:
    """Routes as Python functions, each written with only the steps its pair needs."""

    compiled = False
    label = "pure Python"

    def front(self, table: dict[type, dict[Any, Route]], slow: Callable[..., Any]) -> Any:
        return front(table, slow)

    def capsule_key(self, capsule: Any) -> int:
        return -1  # (keys are read off the tensor)

    def lesson_key(
        self, x: Any, adapter: Adapter, capsule_key: int, align: int, alignment: int
    ) -> Hashable | None:
        key = adapter.fingerprint(x)
        if key is None or alignment >= align:
            return key
        # less aligned than the target shares: a key of its own, which routes tell by the
        # adapter's fast address (without one, they key aligned tensors only)
        return (key, UNALIGNED) if _fast_address(adapter) else None

    def tensor_key(self, x: Any, adapter: Adapter, exporter: Any, align: int) -> Hashable | None:
        key = adapter.fingerprint(x)
        address = _fast_address(adapter)
        if key is None or align <= 1 or address is None or not address(x) & (align - 1):
            return key
        return (key, UNALIGNED)

    def shape(self, lesson: Lesson) -> Hashable:
        # fingerprints of one route must agree on what the plan does besides export and
        # import: its bridge (legacy <-> versioned), its exchange import (with a deferring
        # re-wrap) and whether the result is made writable
        return (lesson.bridge, lesson.rewrap, lesson.import_api, lesson.import_.writable)

    def build(self, lesson: Lesson, known: dict[Hashable, Any], copies: bool) -> Route:
        rebox, defer, adopt, align, address, bare = self._steps(lesson)
        bridge = lesson.bridge
        ndims = _ndims(lesson.import_)
        return pure_route(
            lesson.hub,
            lesson.to,
            lesson.adapter.fingerprint,
            known,
            lesson.info.version is not None if bridge is None else bridge.versioned,
            lesson.import_.as_object,
            align,
            lesson.guarded,
            address,
            lesson.ranges,
            rebox,
            defer,
            adopt,
            lesson.target.import_guard(),
            bare,
            copies,
            ndims,
        )

    def entry(self, lesson: Lesson, route: Route) -> Any:
        if lesson.replay is not None:
            return (lesson.replay, None)
        exporter = lesson.exporter
        # a bare route (as `build` decided it) exports the same capsule without the
        # framework's Python destructor (MXNet's); it takes dressed capsules too (the dtypes
        # the adapter has no bare export for)
        if route.bare:  # type: ignore[attr-defined]
            info = lesson.info
            bare = lesson.adapter.bare_exporter(
                info.version is not None, lesson.tcaps.writes, info.dtype
            )
            exporter = bare or exporter
        return (exporter, lesson.importer)

    def copy_shape(self, exporter: Any, versioned: bool) -> Hashable:
        return None  # (each entry exports by itself: any route serves a copy's key)

    def replay_of(self, entry: Any) -> Callable[[Any, Any], Any] | None:
        return entry[0] if entry[1] is None else None

    def endpoints(self, route: Route, entry: Any, exporter: Any, kind: type) -> tuple[str, str]:
        return dotted_name(entry[0]), dotted_name(entry[1])

    @staticmethod
    def _steps(lesson: Lesson) -> tuple[Any, Any, Any, int, Any, bool]:
        """(rebox, defer, adopt, alignment, fast address, bare) of the route: the plan's
        Bridge step and deferring re-wrap as Conversion runs them, decided per (source type,
        target) as the route's source is."""
        adapter, target, bridge = lesson.adapter, lesson.target, lesson.bridge
        rebox: Any = None
        if bridge is not None:
            rebox = partial(
                cap.bridge,
                to_versioned=bridge.versioned,
                read_only=bridge.read_only,
                allow_read_only=bridge.legacy_read_only_ok,
            )
        boxes = isinstance(target, CapsuleBoxes)
        if cap.gil_first_between(adapter, target, boxes):  # (as Conversion.export re-boxes)
            bridging, boxed = rebox, cap.gil_first
            rebox = boxed if bridging is None else lambda capsule: bridging(boxed(capsule))
        defer = adopt = None
        shared_kind = lesson.info.version is not None if bridge is None else bridge.versioned
        rewrap = lesson.rewrap
        if rewrap is not None and rewrap.defer:  # the plan's re-wrap, as Conversion.rewrap runs it
            # with releases in Python, through the target's exchange API as the compiled route
            # does (3.6 us less for Paddle); else the runtime's re-wrap, released with no GIL
            api = lesson.import_api  # (the plan's Import step: `routes.exchange_route`)
            if cap.RELEASES.python_callbacks and api is not None:
                exchange = cap.exchange_import(api)
                if exchange is None:
                    raise TypeError(f"{dotted_name(api)} has no DLPack C exchange API")
                adopt = cap.deferring_import(rewrap.claim, shared_kind, exchange)
            else:
                defer = cap.deferring(rewrap.claim)
        align = lesson.import_.alignment
        address = _fast_address(adapter)
        bare = type(adapter).bare_exporter is not FastPath.bare_exporter and bare_route(
            rebox, defer, adopt, align > 1 and address is None
        )
        return rebox, defer, adopt, align, address, bare


#: what marks the key of a tensor less aligned than its route's target shares
UNALIGNED = "unaligned"


def _fast_address(adapter: Adapter) -> Callable[[Any], int] | None:
    """The adapter's `fast_address` hook, None where it does not override it."""
    return None if type(adapter).fast_address is FastPath.fast_address else adapter.fast_address


def _ndims(import_: Import) -> tuple[int, int] | None:
    """(fewest, most) dimensions the target holds, where the plan's Import step bounds them:
    the full path refuses others beside the plan (`plan.ndim_refusal`)."""
    if import_.min_ndim == 0 and import_.max_ndim is None:
        return None
    return import_.min_ndim, 64 if import_.max_ndim is None else import_.max_ndim
