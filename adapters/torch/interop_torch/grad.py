"""torch for `interop.wrap` (`TorchAdapter.grad_source()` / `grad_target()`).

- As a source: the function runs on copies of its inputs (it may write into them), its reverse
  rule is `torch.autograd.grad`, and shapes are found ahead with fake tensors.
- As a target: a `torch.autograd.Function`; its backward is the bridged reverse rule, recorded
  by torch when `create_graph=True` (higher orders), the saved pullback otherwise. Under
  `torch.compile` and `torch.export` a call is one of two torch custom operators that every
  bridge shares instead (see below).

Imported only when `interop.wrap` names torch; torch itself only once a wrapped function runs.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from interop.errors import InteropError
from interop.grad import (
    UNCHANGED,
    BridgedFunction,
    BridgedFunctionError,
    Flat,
    OutSpecError,
    Pullback,
    Source,
    Target,
    TensorSpec,
    UnsupportedTransformError,
    dtype_name,
    flatten,
    framework,
    static_key,
    unflatten,
)
from interop.grad.bridged import Stash


class TorchSource(Source):
    """torch tensors are writable: `fn` gets its own copies (`clone`), so a function that
    writes into its inputs never reaches the caller's memory (a TF constant or JAX buffer
    shared zero-copy), and it may write into them even while gradients are recorded. Inputs
    the bridge owns (private copies) are not copied again, except those gradients are recorded
    for: torch refuses in-place writes into the leaves of its graph."""

    name = "torch"

    def tensor_types(self) -> tuple[type, ...]:
        torch = framework("torch")

        return (torch.Tensor,)

    def threads(self, count: int) -> contextlib.AbstractContextManager[None]:
        torch = framework("torch")

        if count <= 0 or count == torch.get_num_threads():
            return UNCHANGED
        return _threads(torch, count)

    def take(self, x: Any) -> Any:
        """A tensor that `convert` may not share writable for its framework's own reasons
        (`Adapter.alias_hazard`: TensorFlow's one-element tensors, such as a loss's
        cotangent, whose buffers TF shares among equal constants) crosses as a NumPy copy of
        its read-only view (2 µs here, compiled), not on `convert`'s remembered copy, which
        exports it twice (4 µs): `fn` gets copies anyway."""
        adapter = self.hub.registry.detect(x)
        if adapter is not None and adapter.alias_hazard(x):
            try:
                return self.convert(framework("numpy").array(self.convert(x, "numpy")), "torch")
            except InteropError:  # not on the host, or a dtype NumPy cannot share: as others
                pass
        return self.convert(x, "torch")

    def give(self, y: Any, to: str) -> Any:
        y = y.detach()
        if y.is_conj():  # torch's exports drop the lazy conj and neg bits: resolve them
            y = y.resolve_conj()
        if y.is_neg():
            y = y.resolve_neg()
        return self.convert(y, to)

    def call(self, fn: Flat, xs: list[Any], owned: bool = False) -> list[Any]:
        torch = framework("torch")

        with torch.no_grad():
            return fn(xs if owned else [x.clone() for x in xs])

    def forward(
        self,
        fn: Flat,
        xs: list[Any],
        diff: list[bool],
        out_diff: list[bool] | None,
        conj: bool,
        owned: bool = False,
    ) -> tuple[list[Any], Pullback]:
        torch = framework("torch")

        leaves = [x.detach().requires_grad_(d) for x, d in zip(xs, diff, strict=True)]
        with torch.enable_grad():
            ys = fn([x.clone() if d or not owned else x for x, d in zip(leaves, diff, strict=True)])
        inputs = [x for x, d in zip(leaves, diff, strict=True) if d]

        def pullback(cts: list[Any]) -> list[Any]:
            return _torch_grads(ys, inputs, cts, conj, create_graph=False)

        return ys, pullback

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        torch = framework("torch")

        n = len(diff)

        def vjp(args: list[Any]) -> list[Any]:
            xs, cts = args[:n], list(args[n:])
            deeper = any(a.requires_grad for a in args)  # being differentiated itself
            leaves = [
                x if x.requires_grad or not d else x.detach().requires_grad_(True)
                for x, d in zip(xs, diff, strict=True)
            ]
            with torch.enable_grad():
                ys = fn([x.clone() for x in leaves])
                inputs = [x for x, d in zip(leaves, diff, strict=True) if d]
                return _torch_grads(ys, inputs, cts, conj, create_graph=deeper)

        return vjp

    def out_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        torch = framework("torch")

        try:
            with warnings.catch_warnings():  # its first import warns about torch.jit.script
                warnings.simplefilter("ignore", DeprecationWarning)
                fake_mode = framework("torch._subclasses.fake_tensor").FakeTensorMode
        except (ImportError, AttributeError):  # pragma: no cover - older torch: meta tensors
            return self._meta_specs(fn, specs)
        with fake_mode(), torch.no_grad():
            xs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in specs]
            ys = fn(xs)
            return [TensorSpec(tuple(y.shape), self.dtype(y)) for y in ys]

    def _meta_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        torch = framework("torch")

        with torch.no_grad():
            xs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta") for s in specs]
            return [TensorSpec(tuple(y.shape), self.dtype(y)) for y in fn(xs)]


@contextlib.contextmanager
def _threads(torch: Any, count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _differentiable(ys: list[Any]) -> list[Any]:
    return [y for y in ys if y.is_floating_point() or y.is_complex()]


def _torch_grads(
    ys: list[Any], inputs: list[Any], cts: list[Any], conj: bool, create_graph: bool
) -> list[Any]:
    """Gradients of `inputs` for cotangents of the differentiable outputs, zeros where unused."""
    torch = framework("torch")

    pairs = [
        (y, torch.conj_physical(c) if conj and c.is_complex() else c)
        for y, c in zip(_differentiable(ys), cts, strict=True)
        if y.requires_grad
    ]
    if pairs and inputs:
        found = torch.autograd.grad(
            [y for y, _ in pairs],
            inputs,
            [c for _, c in pairs],
            retain_graph=True,
            create_graph=create_graph,
            allow_unused=True,
        )
    else:
        found = [None] * len(inputs)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, found, strict=True)]
    return [torch.conj_physical(g) if conj and g.is_complex() else g for g in grads]


def _held(value: Any) -> Any:
    """A non-tensor output of a torch Function: carries the pullback to the context."""
    return (value,)


def _values(xs: Any) -> list[Any]:
    """The tensors' values, detached where they require grad: the bridge hands them to the
    other framework, which `convert` refuses for such tensors (this Function carries their
    gradients; a detached tensor shares their memory and version counter)."""
    return [x.detach() if x.requires_grad else x for x in xs]


def _torch_forward(bridge: BridgedFunction, record: bool, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    if record:
        ys, pull = bridge.forward(_values(xs))
    else:
        ys, pull = bridge.run(_values(xs)), None
    return (*ys, _held(pull))


def _torch_save(
    ctx: Any, bridge: BridgedFunction, xs: tuple[Any, ...], output: tuple[Any, ...]
) -> None:
    ys = output[:-1]
    ctx.bridge, ctx.pull, ctx.count = bridge, output[-1][0], len(xs)
    # Saved tensors carry torch's version check: an input or output changed in place before
    # backward is refused as natively (the source may hold them as residuals, shared).
    ctx.save_for_backward(*xs, *ys)
    ctx.mark_non_differentiable(*[y for y, d in zip(ys, bridge.out_diff, strict=True) if not d])


def _torch_backward(function: Any, ctx: Any, cts: tuple[Any, ...]) -> tuple[Any, ...]:
    torch = framework("torch")
    saved = ctx.saved_tensors
    xs, ys, bridge = list(saved[: ctx.count]), saved[ctx.count :], ctx.bridge
    cts_d = [
        torch.zeros_like(y) if c is None else c
        for y, c, d in zip(ys, cts[:-1], bridge.out_diff, strict=True)
        if d
    ]
    if torch.is_grad_enabled():  # create_graph=True: the rule itself is recorded
        args = [*xs, *cts_d]
        record = any(a.requires_grad for a in args)
        grads = list(function.apply(bridge.backward(), record, *args)[:-1])
    elif ctx.pull is not None:
        grads = ctx.pull(cts_d)
    else:
        grads = bridge.backward().run(_values([*xs, *cts_d]))
    found = iter(grads)
    out: list[Any] = [None, None]
    for d, need in zip(bridge.diff, ctx.needs_input_grad[2:], strict=True):
        grad = next(found) if d else None
        out.append(grad if need else None)
    return tuple(out)


FORWARD_MODE = (
    "forward-mode autodiff (torch.autograd.forward_ad, torch.func.jvp/jacfwd) cannot go through "
    "a function bridged from another framework: only reverse mode is carried (use "
    "torch.autograd.grad, torch.func.jacrev)"
)
#: the same under torch.compile, which would otherwise give zero (or no) tangents silently
COMPILED_FORWARD = (
    "; under torch.compile a forward-AD level (torch.autograd.forward_ad.dual_level) is refused "
    "around any call of it, dual tensors or not"
)
VMAP = (
    "torch.func.vmap (and jacrev/jacfwd/hessian, which vmap) cannot batch a "
    "function bridged from another framework; batch inside it, or loop"
)


@functools.cache
def _torch_functions() -> tuple[Any, Any]:
    """Two `torch.autograd.Function`s with one rule. torch binds the arguments of Functions
    that define `setup_context` through `inspect.signature` on every call (40 µs measured), so
    the plain one serves every call made outside torch.func's transforms; those need
    `setup_context`, and get the second (which refuses vmap with a typed error)."""
    torch = framework("torch")

    class Bridged(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(ctx: Any, bridge: BridgedFunction, record: bool, *xs: Any) -> Any:
            output = _torch_forward(bridge, record, xs)
            _torch_save(ctx, bridge, xs, output)
            return output

        @staticmethod
        def backward(ctx: Any, *cts: Any) -> Any:
            return _torch_backward(Bridged, ctx, cts)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            raise UnsupportedTransformError(FORWARD_MODE)

    class BridgedForTransforms(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(bridge: BridgedFunction, record: bool, *xs: Any) -> Any:
            return _torch_forward(bridge, record, xs)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            _torch_save(ctx, inputs[0], inputs[2:], output)

        @staticmethod
        def backward(ctx: Any, *cts: Any) -> Any:
            return _torch_backward(BridgedForTransforms, ctx, cts)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            raise UnsupportedTransformError(FORWARD_MODE)

        @staticmethod
        def vmap(info: Any, in_dims: Any, *args: Any) -> Any:
            raise UnsupportedTransformError(VMAP)

    return (Bridged, BridgedForTransforms)


# -- torch.compile: two torch custom operators run every bridge --------------------------------
# Dynamo cannot trace the bridge (it runs another framework), nor build operators itself. So
# under torch.compile a wrapped call goes to one function that Dynamo leaves to AOTAutograd's
# non-strict tracing (`torch._dynamo.nonstrict_trace`); there it becomes a call of the custom
# operator `interop::bridge`, whose arguments name the call site (`_Site`: the wrapped function
# by serial number, the layout of its arguments, what was traced) by one int, and carry its
# tensors and Python numbers; its autograd formula is `interop::bridge_grad`, the reverse rule.
# Both find the bridge as an eager call does, when they run (the layout remembers the last one
# found): a Python number may take any value (Dynamo makes a changing one symbolic), and the
# operator registry holds no bridge (a wrapped function is released with its last user).
# Eager calls never take this path, nor import torch._dynamo.

#: Wrapped functions by serial number (never reused, unlike `id`): compiled graphs name them.
_WRAPPED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_SERIAL = itertools.count()
#: The argument layouts each wrapped function was compiled with: a list, and its index by key.
_LAYOUTS: weakref.WeakKeyDictionary[Any, tuple[list[_Layout], dict[Any, int]]] = (
    weakref.WeakKeyDictionary()
)
_OPS: tuple[Any, Any] | None = None
#: what a compiled graph passes besides its site and tensors: Python numbers (floats as float64
#: tensors). A recording forward (see `_Site`) keeps its pullback and returns a token (an int64
#: 0-d tensor, last) that the gradient operator takes.
NUMBERS = "Tensor[] floats, SymInt[] ints"
#: the pullbacks kept by recording forward calls, for their gradient calls (as `xla_ffi`'s)
STASH_SIZE = 8
_STASH = Stash(STASH_SIZE)
#: the value a float argument is traced with: a graph takes any value, and outputs whose specs
#: then differ from those traced are refused
FLOAT_HINT = 1.0
#: the wrapped function's serial number, an attribute Dynamo reads (a string: Dynamo may make
#: an int symbolic, dynamic=True)
KEY = "_interop_torch_key"
FLOAT = "interop: a Python float, as a tensor"  # marks one in the traced call's arguments
STRICT_EXPORT = (
    "torch.export.export(..., strict=True) cannot trace a function bridged from another "
    "framework (its tracer fakes the bridge's arguments and fails); export with strict=False, "
    "the default"
)
RELEASED = (
    "a compiled or exported graph calls an interop.wrap function that no longer exists in this "
    "process; keep the wrapped function alive (referenced) while compiled code calls it (an "
    "exported program runs only where it was exported, while that function lives)"
)


class _Float:
    """A Python float argument, as the float64 tensor that carries it through the graph."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


def _float_as_tensor(leaf: Any) -> Any:
    """Dynamo keeps a changing float symbolic only where a tensor operation takes it (it would
    be a constant, a recompilation per value, otherwise)."""
    if type(leaf) is float:  # not a NumPy float64: a constant, as eagerly
        torch = framework("torch")
        return (FLOAT, torch.zeros((), dtype=torch.float64) + leaf)
    return leaf


def _marked(node: Any) -> bool:
    return (
        isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], str) and node[0] == FLOAT
    )


class _Layout:
    """Where the tensors and Python numbers (float, int) sit among a call's argument leaves;
    the other leaves are constants of the bridge, kept here."""

    def __init__(self, tree: Any, kinds: tuple[str, ...], template: list[Any]) -> None:
        self.tree, self.template = tree, template
        self.at = [[i for i, kind in enumerate(kinds) if kind == k] for k in "tfi"]
        #: the last bridge found, by its numbers and dtypes (a graph's next run wants it again)
        self.last: tuple[Any, BridgedFunction] | None = None
        #: whether `last` serves any shape (the wrapped function's out_spec is not a callable)
        self.per_dtype = False

    def args(self, xs: list[Any], floats: list[Any], ints: list[Any]) -> Any:
        leaves = list(self.template)
        for at, values in zip(self.at, (xs, floats, ints), strict=True):
            for i, value in zip(at, values, strict=True):
                leaves[i] = value
        return unflatten(self.tree, leaves)


class _Site:
    """What a traced call's graph runs with, fixed when it was traced, named in the graph by
    one int (its index in `_SITES`; an operator with fewer arguments dispatches faster): the
    wrapped function's serial number and layout, the ints' values traced with, why the call
    cannot run ("" when it can; see `_refusal`), and whether its caller records gradients
    (grad enabled and a tensor requiring grad). It holds no bridge nor wrapped function."""

    __slots__ = ("hints", "key", "layout", "record", "refusal", "where")

    def __init__(self, key: int, layout: int, hints: tuple[int, ...], refusal: str, record: bool):
        self.key, self.layout, self.hints = key, layout, hints
        self.refusal, self.record = refusal, record
        #: the layout, while its wrapped function lives
        self.where: weakref.ref[_Layout] | None = None


#: every call site traced in this process by its number (never reused; threads tracing the
#: same call at once may each add one, both right), and its number by what it holds
_SITES: dict[int, _Site] = {}
_SITE_INDEX: dict[tuple[int, int, tuple[int, ...], str, bool], int] = {}
_SITE_SERIAL = itertools.count()


def _site(key: int, layout: int, hints: tuple[int, ...], refusal: str, record: bool) -> int:
    held = (key, layout, hints, refusal, record)
    found = _SITE_INDEX.get(held)
    if found is None:
        found = next(_SITE_SERIAL)
        _SITES[found] = _Site(*held)
        _SITE_INDEX[held] = found
    return found


def _kind(torch: Any, leaf: Any) -> str:
    if isinstance(leaf, torch.Tensor):
        return "t"
    if isinstance(leaf, _Float):
        return "f"
    if type(leaf) is int or isinstance(leaf, torch.SymInt):  # not bool: Dynamo keeps those
        return "i"
    return "c"


def _call_by_key(serial: str, args: tuple[Any, ...]) -> Any:
    """A wrapped call as AOTAutograd traces it (defined here, outside any compiled region, as
    `nonstrict_trace` requires; declared non-strict on first use, which Dynamo traces too)."""
    torch = framework("torch")
    key = int(serial)
    wrapped = _WRAPPED[key]
    pytree = framework("torch.utils._pytree")
    args = pytree.tree_map(lambda n: _Float(n[1]) if _marked(n) else n, args, is_leaf=_marked)
    leaves, tree = flatten(args)
    kinds = tuple(_kind(torch, leaf) for leaf in leaves)
    template = [leaf if k == "c" else None for leaf, k in zip(leaves, kinds, strict=True)]
    layouts, index = _LAYOUTS.setdefault(wrapped, ([], {}))
    statics = static_key([leaf for leaf, k in zip(leaves, kinds, strict=True) if k == "c"])
    found = None if statics is None else index.get((tree, kinds, statics))
    if found is None:
        layouts.append(_Layout(tree, kinds, template))
        found = len(layouts) - 1
        if statics is not None:
            index[tree, kinds, statics] = found
    xs, floats, ints = ([v for v, k in zip(leaves, kinds, strict=True) if k == w] for w in "tfi")
    floats = [f.tensor for f in floats]
    hints = tuple(_hint(n) for n in ints)
    record = torch.is_grad_enabled() and any(x.requires_grad for x in xs)
    refusal = _refusal()
    site = _site(key, found, hints, refusal, record)
    bridge, _ = _found(_SITES[site], xs, [FLOAT_HINT] * len(floats), hints)
    ys = _ops()[0](site, xs, floats, ints)
    if record:
        ys = ys[:-1]  # the token
    if refusal == FORWARD_MODE:  # tangents pass the operator by: refused in their own path
        ys = list(_no_tangents().apply(len(ys), *ys, *xs))
    return unflatten(bridge.out_tree, ys)


def _hint(n: Any) -> int:
    """An int's value in the example Dynamo traced with (a symbolic one's hint)."""
    node = getattr(n, "node", None)
    hint = None if node is None else node.hint
    return int(n) if hint is None else int(hint)  # no hint: specialised (a guard)


def _refusal() -> str:
    """Why a call traced now cannot be carried ("" if it can): the operator has no forward-mode
    or batching rule, so torch.func.jvp/jacfwd/vmap inside a compiled function would give zero
    tangents silently. Raised when the graph runs: an exception raised while Dynamo traces
    reaches the caller as Dynamo's own, untyped."""
    interpreters = framework("torch._functorch.pyfunctorch").retrieve_all_functorch_interpreters
    kinds = {str(i.key()).rpartition(".")[2] for i in interpreters()}
    return FORWARD_MODE if "Jvp" in kinds else VMAP if "Vmap" in kinds else ""


@functools.cache
def _no_tangents() -> Any:
    """An identity whose forward-mode rule is `interop::refused`, which raises when it runs:
    jacfwd's graph keeps only tangents (the operator itself may be cut out as unused)."""
    torch = framework("torch")

    @torch.library.custom_op(
        "interop::refused", mutates_args=(), schema="(Tensor like, str why) -> Tensor"
    )
    def refused(like: Any, why: str) -> Any:
        raise UnsupportedTransformError(why)

    refused.register_fake(lambda like, why: torch.empty_like(like))
    refused.register_vmap(lambda info, dims, like, why: (refused(like, why), dims[0]))  # jacfwd

    class NoTangents(torch.autograd.Function):  # type: ignore[name-defined]
        generate_vmap_rule = True

        @staticmethod
        def forward(count: int, *args: Any) -> Any:
            return tuple(y.clone() for y in args[:count])

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.outputs = output

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            return tuple(refused(y, FORWARD_MODE) for y in ctx.outputs)

    return NoTangents


def _refuse(torch: Any, refusal: str) -> None:
    if refusal:
        raise UnsupportedTransformError(refusal)
    # a compiled graph drops the tangents of dual tensors (none reach the operator)
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        raise UnsupportedTransformError(FORWARD_MODE + COMPILED_FORWARD)


def _found(
    site: _Site, xs: list[Any], floats: list[float], ints: Any
) -> tuple[BridgedFunction, list[Any]]:
    """The bridge for a compiled call's arguments, and its tensors (as `bridge_for` gives)."""
    where = None if site.where is None else site.where()
    memo = (tuple(floats), tuple(ints), tuple(x.dtype for x in xs))
    if where is not None:  # alive: so is its wrapped function
        last = where.last
        if last is not None and last[0] == memo and where.per_dtype:
            return last[1], xs  # torch tensors are taken as they are (`Target.prepare`)
    wrapped = _WRAPPED.get(site.key)
    if wrapped is None:
        raise BridgedFunctionError(RELEASED)
    where = _LAYOUTS[wrapped][0][site.layout]
    site.where = weakref.ref(where)
    where.per_dtype = not callable(wrapped.out_spec)  # a callable one: per shape
    bridge, ins = wrapped.bridge_for(where.args(xs, floats, ints))
    where.last = (memo, bridge)
    return bridge, ins


def _specs(xs: list[Any]) -> tuple[TensorSpec, ...]:
    # the source finds shapes from concrete sizes: symbolic ones are specialised (guarded)
    return tuple(TensorSpec(tuple(int(d) for d in x.shape), dtype_name(x.dtype)) for x in xs)


def _empty(torch: Any, specs: list[TensorSpec], like: list[Any]) -> list[Any]:
    device = like[0].device if like else "cpu"
    return [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=device) for s in specs]


def _unshared(xs: list[Any], ys: list[Any]) -> list[Any]:
    """An operator's outputs may not share memory with its inputs (zero-copy identity)."""
    held = {x.untyped_storage().data_ptr() for x in xs}
    return [y.clone() if y.untyped_storage().data_ptr() in held else y for y in ys]


def _ops() -> tuple[Any, Any]:
    """`interop::bridge` and `interop::bridge_grad`, registered once per process as operators
    of a `torch.library.Library`, whose autograd kernel is `_autograd_kernel`: a compiled graph
    calls the operators through the dispatcher, and `torch.library.custom_op`'s Python
    wrappers (autograd, aliasing checks) cost 10 µs a call more (about 40 µs a step of the
    benchmark's MLP with a JAX layer, compiled)."""
    global _OPS
    if _OPS is not None:
        return _OPS
    with _OPS_LOCK:  # threads tracing at once: one defines them
        if _OPS is None:
            _OPS = _define_ops()
    return _OPS


def _define_ops() -> tuple[Any, Any]:
    torch = framework("torch")
    library = torch.library.Library("interop", "FRAGMENT")
    library.define(f"bridge(int site, Tensor[] xs, {NUMBERS}) -> Tensor[]")
    library.define(
        f"bridge_grad(int site, Tensor[] xs, Tensor[] cts, {NUMBERS}, Tensor[] token) -> Tensor[]"
    )
    for name, kernel, fake in (
        ("bridge", _kernel, _fake),
        ("bridge_grad", _grad_kernel, _grad_fake),
    ):
        library.impl(name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"interop::{name}", fake, lib=library)
    library.impl("bridge", _autograd_kernel, "Autograd")
    _LIBRARY.append(library)  # (a library deleted unregisters its operators)
    return (torch.ops.interop.bridge.default, torch.ops.interop.bridge_grad.default)


_LIBRARY: list[Any] = []
_OPS_LOCK = threading.Lock()


def _autograd_kernel(site: int, xs: list[Any], floats: Any, ints: Any) -> Any:
    """`interop::bridge` where autograd looks: recorded through `_op_function()` when its
    caller records gradients (AOTAutograd's trace, which takes its backward into the graph),
    else on to the kernel: called here when nothing stands between (a compiled graph's run,
    on plain tensors), which spares a second trip through the dispatcher (3 µs); through
    the dispatcher below autograd otherwise (fake tensors, functionalization, a mode)."""
    torch = framework("torch")
    if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
        return list(_op_function().apply(site, ints, len(xs), *xs, *floats))
    if _nothing_below(torch, xs, floats):
        return _kernel(site, xs, floats, ints)
    with torch._C._AutoDispatchBelowAutograd():
        return _ops()[0](site, xs, floats, ints)


def _nothing_below(torch: Any, xs: list[Any], floats: list[Any]) -> bool:
    """Whether the dispatcher, below autograd, would go straight to `_kernel`: plain tensors
    and parameters (no other subclass: fake, functional, distributed), no dispatch mode
    (tracing, fake) and no torch.func transform (functionalize, vmap) active."""
    if torch._C._len_torch_dispatch_stack() or torch._C._are_functorch_transforms_active():
        return False
    plain = (torch.Tensor, torch.nn.Parameter)  # (a module's buffers are plain tensors)
    return all(type(x) in plain for x in xs) and all(type(f) in plain for f in floats)


@functools.cache
def _op_function() -> Any:
    """The `torch.autograd.Function` whose backward is `interop::bridge_grad`."""
    torch = framework("torch")

    class BridgeOperator(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(site: int, ints: Any, count: int, *tensors: Any) -> Any:
            xs, floats = list(tensors[:count]), list(tensors[count:])
            with torch._C._AutoDispatchBelowAutograd():
                return tuple(_ops()[0](site, xs, floats, ints))

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            site, ints, count, *tensors = inputs
            ctx.save_for_backward(*tensors, *output)
            ctx.count, ctx.call = (count, len(tensors) - count), (site, ints)

        @staticmethod
        def backward(ctx: Any, *cts: Any) -> Any:
            return (None, None, None, *_backward(ctx, list(cts)), *[None] * ctx.count[1])

    return BridgeOperator


def _kernel(site: int, xs: list[Any], floats: Any, ints: Any) -> Any:
    torch = framework("torch")
    at = _SITES[site]
    _refuse(torch, at.refusal)
    values = [float(f) for f in floats]
    bridge, ins = _found(at, xs, values, ints)
    if at.record:  # the pullback is kept for the gradient operator, which then takes cotangents
        ys, pull = bridge.forward(_values(ins))
        token = [torch.scalar_tensor(_STASH.keep(bridge, pull), dtype=torch.int64)]
    else:
        ys, token = bridge.run(_values(ins)), []
    if floats or tuple(ints) != at.hints:  # the graph may have been traced with others
        traced, _ = _found(at, xs, [FLOAT_HINT] * len(floats), at.hints)
        want = traced.out_specs(_specs(ins))
        got = [TensorSpec(tuple(y.shape), dtype_name(y.dtype)) for y in ys]
        if got != want:
            raise OutSpecError(
                f"{bridge.label} returned {got}, but torch.compile traced it as returning "
                f"{want}: its outputs depend on the value of a Python number argument, which "
                "torch.compile passes as a symbol; compile with dynamic=False (a graph per "
                "value), or pass the number as a 0-d tensor of a fixed spec"
            )
    return [*_unshared(xs, ys), *token]


def _fake(site: int, xs: list[Any], floats: Any, ints: Any) -> Any:
    """`_kernel`'s outputs without data."""
    torch = framework("torch")
    at = _SITES[site]
    bridge, ins = _found(at, xs, [FLOAT_HINT] * len(floats), at.hints)
    token = [torch.empty((), dtype=torch.int64)] if at.record else []
    return [*_empty(torch, bridge.out_specs(_specs(ins)), xs), *token]


def _backward(ctx: Any, cts: list[Any]) -> list[Any]:
    """The gradients of a recorded `interop::bridge` call's tensors, by `interop::bridge_grad`."""
    torch = framework("torch")
    saved, (n, m), (site, ints) = ctx.saved_tensors, ctx.count, ctx.call
    xs, floats, ys = list(saved[:n]), list(saved[n : n + m]), saved[n + m :]
    at = _SITES[site]
    token, ys, cts = (ys[-1:], ys[:-1], cts[:-1]) if at.record else ([], ys, cts)
    bridge, _ = _found(at, xs, [FLOAT_HINT] * m, at.hints)
    cts_d = [
        torch.zeros_like(y) if c is None else c
        for y, c, d in zip(ys, cts, bridge.out_diff, strict=True)
        if d
    ]
    found = iter(_ops()[1](site, xs, cts_d, floats, ints, token))
    return [next(found) if d else None for d in bridge.diff]


def _gradient(bridge: BridgedFunction, xs: list[Any]) -> BridgedFunction:
    if bridge.out_dtypes is None:  # a bridge built again (dropped from the wrap's cache)
        bridge.out_specs(_specs(xs))
    return bridge.backward()


def _grad_kernel(
    site: int, xs: list[Any], cts: list[Any], floats: Any, ints: Any, token: list[Any]
) -> Any:
    bridge, ins = _found(_SITES[site], xs, [float(f) for f in floats], ints)
    pull = _STASH.take(int(token[0]), bridge) if token else None
    if pull is not None:  # the forward's own pullback: no second forward, inputs not taken
        return _unshared([*xs, *cts], pull(_values(list(cts))))
    return _unshared([*xs, *cts], _gradient(bridge, ins).run(_values([*ins, *cts])))


def _grad_fake(
    site: int, xs: list[Any], cts: list[Any], floats: Any, ints: Any, token: list[Any]
) -> Any:
    """`_grad_kernel`'s outputs without data."""
    at = _SITES[site]
    bridge, ins = _found(at, xs, [FLOAT_HINT] * len(floats), at.hints)
    specs = _gradient(bridge, ins).out_specs(_specs([*ins, *cts]))
    return _empty(framework("torch"), specs, xs)


class TorchTarget(Target):
    name = "torch"

    def adopt(self, wrapped: Any) -> None:
        key = next(_SERIAL)
        setattr(wrapped, KEY, str(key))  # an attribute: Dynamo cannot trace weak references
        _WRAPPED[key] = wrapped

    def compiling(self) -> bool:
        return bool(framework("torch").compiler.is_compiling())

    def compiled(self, wrapped: Any, args: tuple[Any, ...]) -> Any:
        torch = framework("torch")
        if torch.compiler.is_exporting() and torch.compiler.is_dynamo_compiling():
            raise UnsupportedTransformError(STRICT_EXPORT)
        args = framework("torch.utils._pytree").tree_map(_float_as_tensor, args)
        return torch._dynamo.nonstrict_trace(_call_by_key)(getattr(wrapped, KEY), args)

    def tensor_types(self) -> tuple[type, ...]:
        return (framework("torch").Tensor,)

    def value_and_grad(self, fn: Any, x: Any) -> tuple[Any, Any]:
        torch = framework("torch")
        x = x.detach().requires_grad_(True)
        y = fn(x)
        (grad,) = torch.autograd.grad(y, x)
        return y.detach(), grad

    def apply(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
        torch = framework("torch")
        plain, for_transforms = _torch_functions()
        transforms = torch._C._are_functorch_transforms_active()
        record = torch.is_grad_enabled() and any(x.requires_grad for x in xs)
        forward_ad = getattr(torch.autograd.forward_ad, "_current_level", 0) >= 0
        if not (record or transforms or forward_ad):
            return bridge.run(_values(xs))  # nothing to differentiate: no Function to build
        function = for_transforms if transforms else plain
        return list(function.apply(bridge, record, *xs)[:-1])


#: what `TorchAdapter.grad_source()` and `grad_target()` return
SOURCE = TorchSource()
TARGET = TorchTarget()
