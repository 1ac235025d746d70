"""Gradients across frameworks: call a function written with one framework's API from another,
and differentiate through it with the caller's own autodiff (reverse mode, any order).

    import interop, jax.numpy as jnp, torch

    f = interop.wrap(lambda x, w: jnp.tanh(x @ w).sum(), "jax", "torch")
    loss = f(torch.randn(4, 3), torch.randn(3, 2, requires_grad=True))
    loss.backward()

Tensors cross with `interop.convert` (zero-copy where memory can be shared); no framework is
imported here until a wrapped function is called. The frameworks themselves come from their
adapters (contract 1.1): `Adapter.grad_source()` gives a `Source` (functions written with the
framework can be wrapped), `Adapter.grad_target()` a `Target` (wrapped functions can be called
with its tensors and differentiated by its autodiff). This package is their base.
"""

from __future__ import annotations

import functools
import os
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .. import api
from ..engine import Hub
from ..errors import AdapterError, InvalidArgumentError, UnknownFrameworkError
from ..registry import Registry
from ..roles import Gradients
from .bridged import BridgedFunction, FlatFn
from .errors import (
    BridgedFunctionError,
    GradientsUnsupportedError,
    OutSpecError,
    UnsupportedTransformError,
)
from .source import UNCHANGED, WIDE, Flat, Pullback, Source, convert, flat_cache, framework
from .structure import (
    TensorSpec,
    TreeDef,
    dtype_name,
    flatten,
    flatten_specs,
    name_of,
    static_key,
    unflatten,
)
from .target import Target

__all__ = [
    "UNCHANGED",
    "WIDE",
    "BridgedFunction",
    "BridgedFunctionError",
    "Flat",
    "GradientsUnsupportedError",
    "OutSpecError",
    "Pullback",
    "Source",
    "TensorSpec",
    "Target",
    "UnsupportedTransformError",
    "Wrapped",
    "convert",
    "dtype_name",
    "flat_cache",
    "framework",
    "wrap",
]

#: Bridges kept per wrapped function (one per argument structure, dtypes and constants).
MAX_BRIDGES = 256
#: The default of wrap's `threads`, when set (an integer; 0 leaves the threads as they are).
THREADS_ENV = "INTEROP_BRIDGE_THREADS"
#: The adapter hook that gives each role's object.
HOOKS = {"source": "grad_source", "target": "grad_target"}


def _hook(adapter: Any, role: str) -> Any:
    """What `adapter`'s hook for `role` gives (None: it brings none, as one not declaring
    `Gradients`); a hook that fails, or gives something else, is the plugin's fault: an
    AdapterError."""
    name = HOOKS[role]
    try:
        if not isinstance(adapter, Gradients):
            found = None
        else:
            found = adapter.grad_source() if role == "source" else adapter.grad_target()
    except Exception as exc:
        raise AdapterError(
            f"the {adapter.name!r} adapter's {name}() failed: {type(exc).__name__}: {exc}"
        ) from exc
    base = Source if role == "source" else Target
    if found is not None and not isinstance(found, base):
        raise AdapterError(
            f"the {adapter.name!r} adapter's {name}() gave a {type(found).__name__}, not an "
            f"interop.grad.{base.__name__}"
        )
    return found


def _able(role: str, registry: Registry) -> str:
    """The frameworks that can be a wrap `role` here, for error messages (loads every adapter,
    none of their frameworks)."""
    names: list[str] = []
    aliases: list[str] = []
    for adapter in registry.loaded():
        try:
            found = _hook(adapter, role)
        except AdapterError:  # reported when that framework is named
            continue
        if found is not None:
            names.append(adapter.name)
            aliases.extend(repr(a) for a in adapter.aliases)
    also = f" (or {', '.join(sorted(aliases))})" if aliases else ""
    return f"{sorted(names)}{also}"


def _framework(which: Any, role: str, registry: Registry) -> Any:
    """The `Source` or `Target` (per `role`) of the framework `which` names in `registry`: an
    adapter's name or alias, or one of its modules (the module object or its name, "jaxlib")."""
    adapter = None
    if isinstance(which, types.ModuleType):
        adapter = registry.detect_module(which.__name__.partition(".")[0])
    elif isinstance(which, str):
        try:
            adapter = registry.get(which)
        except UnknownFrameworkError:
            adapter = registry.detect_module(which)
    if adapter is None:
        able = _able(role, registry)
        raise UnknownFrameworkError(f"wrap: the {role} must be one of {able}, not {which!r}")
    found = _hook(adapter, role)
    if found is None:
        raise GradientsUnsupportedError(
            f"wrap: {adapter.name} cannot be a wrap {role}: its adapter brings no gradient "
            f"{role} ({type(adapter).__name__}.{HOOKS[role]}() returns None); the {role} must "
            f"be one of {_able(role, registry)}"
        )
    return found


class Wrapped:
    """`fn`, written with `source`'s API, as a function of `target` tensors that `target`'s
    autodiff can differentiate (`source` and `target`: what the frameworks' adapters' hooks
    give; `wrap` finds them). Arguments, positional or by keyword, are tensors or nested
    tuples/lists/dicts of them; other leaves (numbers, strings, other objects) are passed to
    `fn` as they are."""

    #: TF's AutoGraph calls objects with this attribute as they are, instead of converting
    #: this code (and the source framework's internals below it) into graph code.
    autograph_info__ = None

    def __init__(
        self,
        fn: Callable[..., Any],
        source: Source,
        target: Target,
        out_spec: Any = None,
        threads: int | None = None,
    ) -> None:
        self.fn, self.out_spec = fn, out_spec
        self.threads = _threads(threads)
        self.source, self.target = source, target
        self._conj = self.source.conj_vjp != self.target.conj_vjp
        self._fixed = None if out_spec is None or callable(out_spec) else _specs(out_spec)
        #: (the key's out_spec part,) where it does not depend on the arguments, else ()
        self._plain_key = () if callable(out_spec) else (_key(self._fixed),)
        self._bridges: OrderedDict[Any, BridgedFunction] = OrderedDict()
        # `fn`'s name and docstring, not its attributes (`updated=()`): a callable object's
        # own (`source`, `target`, ...) would replace this object's
        functools.update_wrapper(self, fn, updated=())
        self.target.adopt(self)
        #: calls with keyword arguments: a twin whose one structure is (args, kwargs), so that
        #: its bridges never meet a positional call's; made here, not in a traced call
        self._keywords = (
            None
            if isinstance(fn, _KeywordCall)
            else Wrapped(_KeywordCall(fn), source, target, _keyword_spec(out_spec), threads)
        )

    def __repr__(self) -> str:
        return f"<interop.wrap of {name_of(self.fn)}: {self.source.name} -> {self.target.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs and self._keywords is not None:
            return self._keywords(args, kwargs)
        if self.target.compiling():  # torch.compile: a custom operator per bridge
            return self.target.compiled(self, args)
        return self.call_with(args, self.target.apply)

    def call_with(
        self, args: tuple[Any, ...], apply: Callable[[BridgedFunction, list[Any]], Any]
    ) -> Any:
        """The call, with the bridge found or built for these arguments run by `apply`."""
        bridge, xs = self.bridge_for(args)
        ys = apply(bridge, xs)
        return unflatten(bridge.out_tree, ys)

    def bridge_for(self, args: tuple[Any, ...]) -> tuple[BridgedFunction, list[Any]]:
        """The bridge for these arguments (found or built) and their tensors, as it takes them."""
        kinds = self.target.tensor_types()
        if self._plain_key and all(isinstance(a, kinds) for a in args):
            # every argument a tensor (the usual call): the key `_build` would make, without
            # walking the structure (5 µs a call)
            xs = [self.target.prepare(a) for a in args]
            dtypes = tuple(self.target.dtype(x) for x in xs)
            key = (*_plain(len(args)), dtypes, self._plain_key[0])
            found = self._bridges.get(key)
            if found is not None:
                self._bridges.move_to_end(key)
                return found, xs
        return self._build(args, kinds)

    def _build(
        self, args: tuple[Any, ...], kinds: tuple[type, ...]
    ) -> tuple[BridgedFunction, list[Any]]:
        leaves, tree = flatten(args)
        at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, kinds)]
        xs = [self.target.prepare(leaves[i]) for i in at]
        tensors = set(at)
        template = [None if i in tensors else leaf for i, leaf in enumerate(leaves)]
        dtypes = tuple(self.target.dtype(x) for x in xs)
        fixed = self._fixed if not callable(self.out_spec) else _specs(self.out_spec(*args))
        statics = static_key([leaf for i, leaf in enumerate(leaves) if i not in tensors])
        key = None if statics is None else (tree, tuple(at), statics, dtypes, _key(fixed))
        bridge = self._bridges.get(key) if key is not None else None
        if bridge is None:
            flat = FlatFn(self.fn, self.source, tree, template, at)
            bridge = BridgedFunction(
                flat,
                self.source,
                self.target.name,
                dtypes,
                label=f"{name_of(self.fn)} ({self.source.name} called from {self.target.name})",
                conj=self._conj,
                fixed=fixed,
                threads=self.threads,
            )
            if key is not None:
                self._bridges[key] = bridge
                if len(self._bridges) > MAX_BRIDGES:
                    self._bridges.popitem(last=False)
        else:
            self._bridges.move_to_end(key)
        return bridge, xs


class _KeywordCall:
    """`fn` as a function of two arguments, its positional arguments and its keyword ones (a
    dict, which the bridge flattens as any other)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn, updated=())  # (messages name `fn`)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.fn(*args, **kwargs)


def _keyword_spec(out_spec: Any) -> Any:
    """`out_spec` for `_KeywordCall`: a callable one gets the arguments as `fn` does."""
    if not callable(out_spec):
        return out_spec
    return lambda args, kwargs: out_spec(*args, **kwargs)


@functools.lru_cache(maxsize=64)
def _plain(count: int) -> tuple[Any, ...]:
    """The start of the bridge key of `count` arguments that are all tensors: their structure,
    where the tensors are, and no constants."""
    _, tree = flatten(tuple(range(count)))
    return (tree, tuple(range(count)), static_key([]))


def _specs(out_spec: Any) -> tuple[list[TensorSpec], TreeDef]:
    try:
        specs, tree = flatten_specs(out_spec)
    except TypeError as exc:
        raise OutSpecError(f"out_spec: {exc}") from exc
    found = [s for s in specs if s is not None]
    if len(found) != len(specs):
        raise OutSpecError("out_spec: every output leaf needs a shape and a dtype")
    return found, tree


def _threads(threads: int | None) -> int:
    if threads is None:
        found = os.environ.get(THREADS_ENV, "1")
        try:
            threads = int(found)
        except ValueError:
            raise InvalidArgumentError(
                f"{THREADS_ENV}={found!r}: expected a whole number of threads (0: leave them)"
            ) from None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise InvalidArgumentError(f"wrap: threads must be a whole number >= 0, not {threads!r}")
    return threads


def _key(fixed: tuple[list[TensorSpec], TreeDef] | None) -> Any:
    return None if fixed is None else (tuple(fixed[0]), fixed[1])


def wrap(
    fn: Callable[..., Any],
    source: Any,
    target: Any,
    *,
    out_spec: Any = None,
    threads: int | None = None,
    hub: Hub | None = None,
) -> Callable[..., Any]:
    """`fn`, written with `source`'s API, callable with `target` tensors and differentiable in
    reverse mode by `target`'s autodiff (torch.autograd; jax.grad/vjp, also under jit, vmap and
    scan; tf.GradientTape, also in tf.function), to any order.

    `source`, `target`: a framework whose adapter brings gradients ("torch", "jax",
    "tensorflow" or "tf" here, and plugins'), by name, alias or module. `out_spec`: the
    outputs' shapes and dtypes, in `fn`'s output structure (leaves with `.shape` and `.dtype`,
    such as `jax.ShapeDtypeStruct`, or `(shape, dtype)` pairs), or a callable of the arguments
    returning that; needed only where the source cannot infer them ahead (JAX under jit and
    tf.function need them before running). `threads`: the source's intra-op threads while `fn`
    runs called back from the target's compiled runtime (jax.jit, tf.function), whose own
    threads hold the cores meanwhile; 1 by default (or $INTEROP_BRIDGE_THREADS), 0 leaves them
    as they are. Only torch sets them per call. Wrapping within one framework returns `fn`.
    `hub`: the hub whose adapters' gradient hooks are looked up, and which every tensor the
    bridge moves goes through (default: `interop.convert`'s).
    """
    calls = api.calls(hub)
    registry = calls.hub.registry
    src, dst = _framework(source, "source", registry), _framework(target, "target", registry)
    if not callable(fn):
        raise InvalidArgumentError(
            f"wrap: fn must be a function written with {src.name}'s API, not a {type(fn).__name__}"
        )
    if src.name == dst.name:
        return fn
    return Wrapped(fn, src.through(calls), dst, out_spec, threads)
