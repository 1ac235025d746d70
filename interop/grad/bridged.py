"""One wrapped function for one argument structure: the user's function as a flat function of
tensors, run in its own framework on tensors converted from the target's, with its reverse
rule (itself a bridge, so that gradients of gradients work the same way).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..errors import InteropError, UnsupportedDTypeError
from .errors import BridgedFunctionError, OutSpecError
from .source import Pullback, Source, owned_keyword
from .structure import LEAF, TensorSpec, TreeDef, flatten, name_of, unflatten

LEAF_TREE = TreeDef(LEAF, (), ())


class FlatFn:
    """`fn` as a function of its tensor leaves only: the structure and the other leaves are
    closed in, outputs come back flat and their structure is recorded in `out_tree`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        source: Source,
        tree: TreeDef,
        template: list[Any],
        at: list[int],
    ) -> None:
        self.fn, self.source, self.tree, self.template, self.at = fn, source, tree, template, at
        self.out_tree: TreeDef | None = None
        self.cache: dict[Any, Any] = {}
        # every argument a tensor, none nested: `fn(*xs)` as it is (called per step under jit)
        self.plain = (
            tree.kind is tuple
            and all(c.kind == LEAF for c in tree.children)
            and at == list(range(len(tree.children)))
        )

    def __call__(self, xs: list[Any]) -> list[Any]:
        if self.plain:
            args = tuple(xs)
        else:
            leaves = list(self.template)
            for i, x in zip(self.at, xs, strict=True):
                leaves[i] = x
            args = unflatten(self.tree, leaves)
        try:
            out = self.fn(*args)
        except Exception as exc:
            raise BridgedFunctionError(
                f"{name_of(self.fn)} raised {type(exc).__name__} in {self.source.name}: {exc}"
            ) from exc
        types = self.source.tensor_types()
        if isinstance(out, types):  # one tensor out: nothing to flatten
            self.out_tree = LEAF_TREE
            return [out]
        ys, tree = flatten(out)
        for path, y in zip(tree.paths("output"), ys, strict=True):
            if not isinstance(y, types):
                raise OutSpecError(
                    f"{name_of(self.fn)} returned {type(y).__name__} at {path}; every output "
                    f"leaf must be a {self.source.name} tensor"
                )
        self.out_tree = tree
        return ys


class BridgedFunction:
    """A flat function of `source` tensors, called with `target` tensors."""

    def __init__(
        self,
        fn: Callable[[list[Any]], list[Any]],
        source: Source,
        target: str,
        in_dtypes: tuple[str, ...],
        *,
        label: str,
        conj: bool,
        fixed: tuple[list[TensorSpec], TreeDef] | None = None,
        grads_of: list[bool] | None = None,
        threads: int = 0,
    ) -> None:
        self.fn, self.source, self.target, self.label, self.conj = fn, source, target, label, conj
        self.diff = [TensorSpec((), d).differentiable for d in in_dtypes]
        self.in_dtypes = in_dtypes
        self.fixed = fixed
        self.grads_of = grads_of  # a gradient bridge: outputs have these inputs' specs
        self.threads = threads  # the source's intra-op threads inside the target's runtime
        self.specs: dict[tuple[TensorSpec, ...], list[TensorSpec]] = {}
        self.out_dtypes: list[str] | None = fixed and [s.dtype for s in fixed[0]]
        self.state: dict[str, Any] = {}  # what the target builds once (custom rule, Function)
        self._backward: BridgedFunction | None = None
        self._out_diff: tuple[list[str] | None, list[bool]] = (None, [])

    @property
    def out_tree(self) -> TreeDef:
        if self.fixed is not None:
            return self.fixed[1]
        tree = getattr(self.fn, "out_tree", None)
        assert tree is not None, "the outputs' structure is known once the function ran"
        return tree

    @property
    def out_diff(self) -> list[bool]:
        dtypes = self.out_dtypes
        assert dtypes is not None
        if self._out_diff[0] is not dtypes:  # computed once per list of dtypes
            self._out_diff = (dtypes, [TensorSpec((), d).differentiable for d in dtypes])
        return self._out_diff[1]

    # -- conversions -------------------------------------------------------------------------
    def take(self, xs: list[Any], what: str = "argument") -> list[Any]:
        take = self.source.take
        try:
            return [take(x) for x in xs]
        except InteropError:
            return [self._convert(take, x, what, i) for i, x in enumerate(xs)]  # names the leaf

    def give(self, ys: list[Any], to: str, what: str = "output") -> list[Any]:
        give = self.source.give
        try:
            return [give(y, to) for y in ys]
        except InteropError:
            return [self._convert(lambda y: give(y, to), y, what, i) for i, y in enumerate(ys)]

    def _convert(self, move: Callable[[Any], Any], x: Any, what: str, i: int) -> Any:
        try:
            return move(x)
        except InteropError as exc:  # same type, naming the function and the leaf
            raise type(exc)(
                f"{self.label}: {what} leaf {i}: {exc}{self._narrowing(exc, what)}"
            ) from exc

    def _narrowing(self, exc: InteropError, what: str) -> str:
        """Where a dtype refusal offers `convert`'s `dtypes=`, which a wrapped call does not
        take: where the same checked narrowing goes instead."""
        if not isinstance(exc, UnsupportedDTypeError) or "dtypes=" not in str(exc):
            return ""
        if what == "argument":
            return (
                f"; a wrapped call takes no dtypes=: narrow the argument before the call, "
                f"checked, with interop.convert(x, {self.target!r}, dtypes=...)"
            )
        if what == "output":
            return (
                f"; a wrapped call takes no dtypes=: have the function return it narrowed, "
                f"checked, with interop.convert(y, {self.source.name!r}, dtypes=...)"
            )
        return ""

    # -- running ----------------------------------------------------------------------------
    def run(self, xs: list[Any], to: str | None = None, owned: bool = False) -> list[Any]:
        """The outputs as `to` tensors (the target's by default), no gradient recorded.
        `owned`: `xs` are the bridge's private copies, no one else's (the source need not
        copy them again)."""
        args = self.take(xs)
        with self._guard():
            ys = self.source.call(self.fn, args, **owned_keyword(owned))
        self._check(ys)
        return self.give(ys, to or self.target)

    def run_inside(self, xs: list[Any], to: str | None = None, owned: bool = False) -> list[Any]:
        """`run`, called back from the target's compiled runtime (`jax.jit`, `tf.function`),
        whose thread pool is busy meanwhile: the source runs on `threads` intra-op threads
        (where it can set them per call), so that the two pools do not fight for the cores."""
        with self.source.threads(self.threads):
            return self.run(xs, to, owned)

    def forward(
        self, xs: list[Any], to: str | None = None, owned: bool = False
    ) -> tuple[list[Any], Pullback]:
        """The outputs and a pullback: cotangents of the differentiable outputs to gradients
        of the differentiable inputs, as `to` tensors (the target's by default; `owned` as
        for `run`)."""
        known = None if self.out_dtypes is None else self.out_diff
        args = self.take(xs)
        with self._guard():
            ys, pull = self.source.forward(
                self.fn, args, self.diff, known, self.conj, **owned_keyword(owned)
            )
        self._check(ys)

        def pullback(cts: list[Any]) -> list[Any]:
            args = self.take(cts, "cotangent")
            with self._guard(" while computing its gradient"):
                grads = pull(args)
            return self.give(grads, to or self.target, "gradient")

        return self.give(ys, to or self.target), pullback

    def narrowed(self, needed: list[bool]) -> BridgedFunction:
        """This function differentiated in `needed` inputs only (a subset of `diff`), built once
        per mask: a target that knows which inputs its caller differentiates (JAX's perturbed
        primals) spares the source the others' gradients."""
        needed = [bool(n and d) for n, d in zip(needed, self.diff, strict=True)]
        if needed == self.diff:
            return self
        key = "narrowed " + "".join("1" if n else "0" for n in needed)
        narrow = self.state.get(key)
        if narrow is None:
            narrow = self.state[key] = BridgedFunction(
                self.fn,
                self.source,
                self.target,
                self.in_dtypes,
                label=self.label,
                conj=self.conj,
                fixed=self.fixed,
                grads_of=self.grads_of,
                threads=self.threads,
            )
            narrow.diff = needed
            narrow.specs = self.specs  # the same function: the same outputs
        if narrow.out_dtypes is None:
            narrow.out_dtypes = self.out_dtypes
        return narrow

    def backward(self) -> BridgedFunction:
        """The bridge of `(inputs, cotangents) -> gradients`, built once."""
        if self._backward is None:
            assert self.out_dtypes is not None
            vjp = self.source.vjp_fn(self.fn, self.diff, self.out_diff, self.conj)
            cts = tuple(d for d in self.out_dtypes if TensorSpec((), d).differentiable)
            self._backward = BridgedFunction(
                vjp,
                self.source,
                self.target,
                (*self.in_dtypes, *cts),
                label=f"{self.label} (gradient)",
                conj=self.conj,
                grads_of=self.diff,
                threads=self.threads,
            )
        return self._backward

    def _guard(self, doing: str = "") -> _Guard:
        """Failures of the source framework (its autodiff too) as typed errors naming `fn`."""
        return _Guard(self.label, self.source.name, doing)

    # -- shapes -----------------------------------------------------------------------------
    def out_specs(self, specs: tuple[TensorSpec, ...]) -> list[TensorSpec]:
        """The outputs' specs for inputs of `specs`: as announced, or found by the source
        framework without data (JAX's `eval_shape`, torch's fake tensors, a TF trace)."""
        if self.fixed is not None:
            return self.fixed[0]
        if self.grads_of is not None:  # a gradient has its input's spec
            grads = [s for s, d in zip(specs, self.grads_of, strict=False) if d]
            self.out_dtypes = [s.dtype for s in grads]
            return grads
        found = self.specs.get(specs)
        if found is None:
            try:
                found = self.source.out_specs(self.fn, list(specs))
            except BridgedFunctionError as exc:  # fn itself failed on data-less tensors
                cause = exc.__cause__ or exc
                raise OutSpecError(
                    f"{self.label}: the outputs' shapes and dtypes are needed before running "
                    f"(traced inputs), and {self.source.name} could not find them without data: "
                    f"{type(cause).__name__}: {cause}; if the function runs on real data, pass "
                    "out_spec= to interop.wrap"
                ) from cause
            except InteropError:
                raise
            except Exception as exc:
                raise OutSpecError(
                    f"{self.label}: {self.source.name} could not find the outputs' shapes and "
                    f"dtypes without data ({type(exc).__name__}: {exc}); pass out_spec= to "
                    "interop.wrap"
                ) from exc
            self.specs[specs] = found
        self.out_dtypes = [s.dtype for s in found]
        return found

    def _check(self, ys: list[Any]) -> None:
        dtypes = [self.source.dtype(y) for y in ys]
        if self.fixed is not None:
            expected, tree = self.fixed
            got_tree = getattr(self.fn, "out_tree", tree)
            got = [
                TensorSpec(tuple(int(d) for d in y.shape), t)
                for y, t in zip(ys, dtypes, strict=True)
            ]
            if got_tree != tree or got != expected:
                raise OutSpecError(
                    f"{self.label} returned {unflatten(got_tree, got)}, but out_spec announced "
                    f"{unflatten(tree, expected)}"
                )
        if dtypes != self.out_dtypes:
            self.out_dtypes = dtypes

    def check_specs(self, got: list[TensorSpec], expected: list[TensorSpec]) -> None:
        if got != expected:
            raise OutSpecError(
                f"{self.label} returned {got}, but {expected} was expected (out_spec or the "
                f"shapes inferred ahead)"
            )


class _Guard:
    """`BridgedFunction._guard` (a plain context manager: entered twice per step under jit)."""

    __slots__ = ("doing", "label", "name")

    def __init__(self, label: str, name: str, doing: str) -> None:
        self.label, self.name, self.doing = label, name, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, InteropError):
            raise BridgedFunctionError(
                f"{self.label}{self.doing}: {self.name} raised {kind.__name__}: {exc}"
            ) from exc


class Stash:
    """Forward calls' pullbacks kept for the backward call that names them by token, where a
    target's compiled runtime (an XLA custom call, a torch custom operator) calls a bridge's
    forward and its backward separately: the backward then takes only the cotangents and
    needs no second forward. The oldest is dropped beyond `size` (a backward that never runs,
    or runs elsewhere, keeps nothing for long); a token not found (dropped, already used, or
    0) tells the caller to recompute."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[int, tuple[BridgedFunction, Pullback]] = OrderedDict()
        self._tokens = itertools.count()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, bridge: BridgedFunction, pull: Pullback) -> int:
        """A token (an int32 > 0) naming `bridge`'s `pull`."""
        token = next(self._tokens) % (2**31 - 1) + 1
        self._kept[token] = (bridge, pull)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return token

    def take(self, token: int, bridge: BridgedFunction) -> Pullback | None:
        """The pullback `token` names, once, if `bridge` kept it."""
        held = self._kept.pop(token, None)
        return held[1] if held is not None and held[0] is bridge else None
