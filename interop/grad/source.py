"""The framework a wrapped function is written in: how to run it, and its reverse-mode rule.

`Source` is the base class an adapter's `grad_source()` hook returns a subclass of (the JAX,
torch and TensorFlow ones live in their adapters: `interop_jax.grad`, ...); the core names no
framework here.

Every method works on flat lists of the source's tensors. A flat function `fn(xs) -> ys` is the
user's function with its structure and non-tensor arguments closed in (see `bridge.FlatFn`).
`vjp_fn` returns another flat function, written with the source's own API, so that the rule
can be bridged again: that is how second and higher orders reach the target's autodiff.

Conventions for complex numbers differ: JAX's VJP is `c·J`, torch's and TensorFlow's
`c·conj(J)`. With `conj=True` cotangents are conjugated on the way in and gradients on the
way out, so the result is in the target's convention.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import api
from .structure import TensorSpec, dtype_name

if TYPE_CHECKING:
    from ..engine import Calls, Hub

Flat = Callable[[list[Any]], list[Any]]
Pullback = Callable[[list[Any]], list[Any]]


def framework(name: str) -> Any:
    """A framework module, imported lazily (untyped here: the core type-checks without them)."""
    return sys.modules.get(name) or importlib.import_module(name)


def owned_keyword(owned: bool) -> dict[str, bool]:
    """The `owned` keyword of `Source.call` and `Source.forward`, passed only when set (a
    plugin's source may predate it)."""
    return {"owned": True} if owned else {}


#: what `Source.threads` returns when the threads stay as they are
UNCHANGED: contextlib.AbstractContextManager[None] = contextlib.nullcontext()

#: dtypes JAX narrows to 32 bits when jax_enable_x64 is off
WIDE = frozenset({"float64", "complex128", "int64", "uint64"})


def convert(x: Any, to: str) -> Any:
    """`interop.convert` (the core copies unaligned buffers before TensorFlow sees them): the
    default hub's. A source's own moves go through `Source.convert`, its wrap's hub."""
    return api.convert(x, to)


class Source:
    """What the bridge needs from the framework `fn` is written in (subclassed by adapters:
    `tensor_types`, `vjp_fn` and `out_specs` are required, the rest have defaults that suit a
    framework whose functions are pure)."""

    name = ""
    #: True when the framework's VJP is `c·conj(J)` (torch, TensorFlow), False for JAX's `c·J`.
    conj_vjp = True
    #: the calls (a hub's `convert`) this source's tensors move through: `interop.wrap(hub=)`
    #: binds its hub's (`through`); None: the default hub's, `interop.convert`
    calls: Calls | None = None

    def through(self, calls: Calls) -> Source:
        """This source moving its tensors through `calls` (a hub's): a shallow copy, since an
        adapter's hook gives one object to every wrap; itself for the default hub's calls."""
        wanted = None if calls is api.CALLS else calls
        if wanted is self.calls:
            return self
        bound = copy.copy(self)
        bound.calls = wanted
        return bound

    def convert(self, x: Any, to: str) -> Any:
        """`x` as framework `to`'s tensor, through the hub this source was wrapped with."""
        calls = self.calls
        return api.convert(x, to) if calls is None else calls.convert(x, to)

    @property
    def hub(self) -> Hub:
        """The hub this source's tensors move through (its registry names their adapters)."""
        return api.HUB if self.calls is None else self.calls.hub

    def tensor_types(self) -> tuple[type, ...]:
        """The framework's tensor types: what `fn` takes and must return (leaves)."""
        raise NotImplementedError

    def dtype(self, x: Any) -> str:
        return dtype_name(x.dtype)

    def take(self, x: Any) -> Any:
        """A tensor of this framework holding `x` (shared where memory can be shared)."""
        return self.convert(x, self.name)

    def give(self, y: Any, to: str) -> Any:
        """An output of `fn` as framework `to`'s tensor."""
        return self.convert(y, to)

    def call(self, fn: Flat, xs: list[Any], owned: bool = False) -> list[Any]:
        """`fn(xs)` with no gradient recorded. `owned`: the memory of `xs` is the bridge's own
        private copy, which no one else sees (a source that copies inputs may skip that)."""
        return fn(xs)

    def threads(self, count: int) -> contextlib.AbstractContextManager[None]:
        """This framework's intra-op threads set to `count` (0: as they are) meanwhile. JAX and
        TensorFlow fix theirs when their runtime starts: they are left as they are. (Entered
        twice per step under `jax.jit`: a plain object, not a generator, where nothing
        changes.)"""
        return UNCHANGED

    def forward(
        self,
        fn: Flat,
        xs: list[Any],
        diff: list[bool],
        out_diff: list[bool] | None,
        conj: bool,
        owned: bool = False,
    ) -> tuple[list[Any], Pullback]:
        """`fn(xs)` and a pullback from cotangents of the differentiable outputs to gradients
        of the differentiable inputs (`owned` as for `call`). Here the pullback is `vjp_fn`
        (built once per flat function), which recomputes the forward: no state is kept."""
        ys = self.call(fn, xs, **owned_keyword(owned))
        known = out_diff if out_diff is not None else [self._diff(y) for y in ys]
        back = self.cached_vjp(fn, diff, known, conj)
        return ys, lambda cts: self.call(back, [*xs, *cts])

    def cached_vjp(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        """`vjp_fn`, built once per flat function and mask."""
        cache = flat_cache(fn)
        key = ("vjp", tuple(diff), tuple(out_diff), conj)
        back: Flat | None = cache.get(key)
        if back is None:
            back = cache[key] = self.vjp_fn(fn, diff, out_diff, conj)
        return back

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        """A flat function `(xs + cotangents) -> gradients of the differentiable inputs`."""
        raise NotImplementedError

    def out_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        """The outputs' specs for inputs of these specs, found without running on data."""
        raise NotImplementedError

    def _diff(self, y: Any) -> bool:
        return TensorSpec((), self.dtype(y)).differentiable


def flat_cache(fn: Any) -> dict[Any, Any]:
    """A flat function's own cache (its jitted forms and VJP live as long as it does)."""
    found: dict[Any, Any] | None = getattr(fn, "cache", None)
    if found is None:
        found = fn.cache = {}
    return found
