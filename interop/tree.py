"""Whole structures in one call: state dicts, batches and pytrees, every tensor leaf converted.

Containers are rebuilt with their own types: dicts of any kind (OrderedDict, defaultdict and
key order kept), lists, tuples, namedtuples, deques, dataclasses (frozen ones too: fields are
set on a shallow copy, so `__init__` and `__post_init__` do not run again), and the nodes of
frameworks' pytree registries (Flax structs, Equinox modules, classes registered with torch's),
which the framework's adapter takes apart through its `tree_node` hook while the program has
imported that framework. The standard library's containers are walked here: the core depends
on the standard library only (optree would be a dependency), and no pytree implementation
keeps all of their types, key orders and dataclasses as they are (JAX sorts a defaultdict's
keys; none takes plain dataclasses apart). Registered nodes are flattened one level at a time
by their own framework's registry, which alone knows how to take them apart and rebuild them;
the core asks the adapters in name order, after the standard containers and before
dataclasses, and remembers per type which one took it apart.

Every tensor leaf goes through the `convert` (or `explain`) of the hub the call is made through
(`interop.api` passes its `Calls`: `interop.convert_tree(..., hub=)`); every other leaf (numbers,
strings, bytes, None, any object no route recognises) is returned as it is, the same object.
A leaf that appears twice is converted once, and under `copy=True` so are distinct leaves over
the same memory (a state dict's tied weights), so ties survive copies. A failure returns
nothing: every failing leaf is named by path, and the leaves already converted are released
with the half-built result. Structures are walked by a loop, not recursion: any depth works.
"""

from __future__ import annotations

import collections
import copy as copying
import dataclasses
import sys
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from . import capsule as cap
from . import sources
from .adapter import Adapter
from .engine import Calls, copy_flag, parse_device
from .errors import (
    AdapterError,
    InteropError,
    InvalidArgumentError,
    UnsupportedDTypeError,
    UnsupportedTensorError,
    bare,
)
from .plan import Plan
from .registry import Registry
from .roles import FastPath, PytreeNodes, TreeNode, TreeNodes

RAISE = "raise"
KEEP = "keep"
#: errors a leaf may get that `unsupported="keep"` turns into "returned as it is"
UNSUPPORTED = (UnsupportedDTypeError, UnsupportedTensorError)

#: leaves that are data, never tensors (bytes too: in a batch they are strings, not buffers)
SCALARS = frozenset({str, bytes, int, float, bool, complex, type(None)})

SHARED = "shared"
COPIED = "copied"
REFUSED = "refused"
KEPT = "kept"

Rebuild = Callable[[list[Any]], Any]
Node = TreeNode


# --- what a leaf is --------------------------------------------------------------------------
def is_tensor(x: Any, registry: Registry) -> bool:
    """Whether `convert` takes `x` as a tensor: an adapter's tensor (of `registry`), a capsule,
    a DLPack producer, or a source without DLPack (buffers, array interfaces, Arrow)."""
    return (
        registry.detect(x) is not None
        or cap.is_capsule(x)
        or hasattr(x, "__dlpack__")
        or sources.recognises(x)
    )


# --- how a container comes apart and goes back together --------------------------------------
def _refill_dict(x: dict[Any, Any], keys: list[Any]) -> Rebuild:
    def rebuild(values: list[Any]) -> Any:
        new = copying.copy(x)  # same type and attributes (a defaultdict's factory), same order
        for key, value in zip(keys, values, strict=True):
            new[key] = value
        return new

    return rebuild


def _refill_dataclass(x: Any, names: list[str]) -> Rebuild:
    def rebuild(values: list[Any]) -> Any:
        new = copying.copy(x)
        for name, value in zip(names, values, strict=True):
            object.__setattr__(new, name, value)  # frozen dataclasses too
        return new

    return rebuild


def fragment(render: Callable[[Any], str], key: Any, index: int) -> str:
    """`render(key)`, a child's path fragment; a key that cannot be printed (its `repr` raises)
    is named by its type and position instead, so the error that matters (a leaf's) is the
    one raised, with a path that still finds the leaf. For adapters' `tree_node` hooks too."""
    try:
        return render(key)
    except Exception:
        last = key[-1] if type(key) is tuple and key else key  # a key path: its last key
        return f"[<{type(last).__qualname__} key #{index}>]"


def _subscript(key: Any) -> str:
    return f"[{key!r}]"


def _subscripts(keys: Any) -> list[str]:
    """`['key']` path fragments of a dict's keys, in order."""
    return [fragment(_subscript, k, i) for i, k in enumerate(keys)]


#: per adapter (by id, with the adapter kept): the function its `tree_node` hook gave, or None
_HOOKS: dict[int, tuple[Adapter, TreeNodes | None]] = {}


def _hook(adapter: Adapter) -> TreeNodes | None:
    """`adapter.tree_node()`, asked once; a hook that fails or gives no function is an
    AdapterError naming it (asked again next time: nothing wrong is remembered)."""
    known = _HOOKS.get(id(adapter))
    if known is not None and known[0] is adapter:
        return known[1]
    try:
        nodes = adapter.tree_node() if isinstance(adapter, PytreeNodes) else None
    except Exception as exc:
        raise AdapterError(f"the {adapter.name} adapter's tree_node() failed: {exc!r}") from exc
    if nodes is not None and not callable(nodes):
        raise AdapterError(
            f"the {adapter.name} adapter's tree_node() gave {nodes!r}, not a function or None"
        )
    _HOOKS[id(adapter)] = (adapter, nodes)
    return nodes


class _Known:
    """What a registry's adapters said of tree nodes, kept per registry (`_known`)."""

    __slots__ = ("last", "registered")

    def __init__(self) -> None:
        #: the last answer of `_hooks`, with the imported adapters it was found for, and when:
        #: (modules imported, the registry's generation)
        self.last: list[Any] = [[], [], None]
        #: per type: (adapter name, node function) of the adapter whose hook takes its
        #: instances apart. Only found nodes are remembered: a type that is a leaf today may be
        #: registered later (a negative answer kept here once left a newly registered
        #: Flax-style class unconverted, silently)
        self.registered: dict[type, tuple[str, TreeNodes]] = {}


_KNOWN: weakref.WeakKeyDictionary[Registry, _Known] = weakref.WeakKeyDictionary()


def _known(registry: Registry) -> _Known:
    known = _KNOWN.get(registry)
    if known is None:
        known = _KNOWN[registry] = _Known()
    return known


def _hooks(registry: Registry) -> list[tuple[str, TreeNodes]]:
    """(adapter name, node function) of every adapter of `registry` bringing tree nodes whose
    framework is imported, by adapter name: the first to take a type apart takes it. Asked per
    dataclass and leaf: the answer stands while no module is imported and no adapter loaded."""
    last = _known(registry).last
    if last[2] == (len(sys.modules), registry.generation):
        return last[1]
    adapters = registry.imported()
    when = (len(sys.modules), registry.generation)
    if adapters == last[0]:  # the same adapters as last time
        last[2] = when
        return last[1]
    found = []
    for adapter in sorted(adapters, key=lambda a: a.name):
        nodes = _hook(adapter)
        if nodes is not None:
            found.append((adapter.name, nodes))
    last[:] = [adapters, found, when]  # (a hook that failed is asked again next time)
    return found


def _ask(name: str, nodes: TreeNodes, x: Any) -> Node | None:
    """`nodes(x)`, checked: its failures and malformed answers are UnsupportedTensorErrors
    naming the adapter (the walk adds the path)."""
    try:
        node = nodes(x)
        if node is None:
            return None
        keys, children, build = node
        keys, children = list(keys), list(children)
    except Exception as exc:
        raise UnsupportedTensorError(f"the {name} adapter's tree node failed: {exc!r}") from exc
    if len(keys) != len(children) or not callable(build):
        raise UnsupportedTensorError(
            f"the {name} adapter's tree node gave {len(keys)} keys for {len(children)} "
            f"children" + ("" if callable(build) else " and no rebuild function")
        )
    if not all(type(key) is str for key in keys):
        raise UnsupportedTensorError(f"the {name} adapter's tree node gave keys that are not str")
    return keys, children, build


def _registered(x: Any, registry: Registry) -> Node | None:
    """`x`'s node as an adapter's `tree_node` hook gives it (a pytree registry's), or None."""
    kind = type(x)
    registered = _known(registry).registered
    known = registered.get(kind)
    node = None
    if known is None:
        for name, nodes in _hooks(registry):
            node = _ask(name, nodes, x)
            if node is not None:
                registered[kind] = (name, nodes)
                break
    else:
        node = _ask(*known, x)
    if node is None:
        return None
    keys, children, build = node

    def rebuild(values: list[Any]) -> Any:
        # Unchanged, it stays itself: registries may rebuild a type as another (torch.Size
        # comes back from torch's as a tuple).
        if all(new is old for new, old in zip(values, children, strict=True)):
            return x
        return build(values)

    return keys, children, rebuild


def _node(x: Any, registry: Registry) -> Node | None:
    """(path suffixes, children, rebuild) of a container, or None for a leaf."""
    kind = type(x)
    if kind is dict or kind is list or kind is tuple:
        children = list(x.values()) if kind is dict else list(x)
        suffixes = _subscripts(x) if kind is dict else [f"[{i}]" for i in range(len(x))]
        return (
            suffixes,
            children,
            (lambda v: dict(zip(x, v, strict=True))) if kind is dict else kind,
        )
    if isinstance(x, dict):  # before the registries: JAX would sort a defaultdict's keys
        keys = list(x)
        return _subscripts(keys), list(x.values()), _refill_dict(x, keys)
    if isinstance(x, tuple) and hasattr(kind, "_fields"):  # a namedtuple
        return [f".{f}" for f in kind._fields], list(x), kind._make
    if isinstance(x, collections.deque):
        return (
            [f"[{i}]" for i in range(len(x))],
            list(x),
            lambda v: kind(v, maxlen=x.maxlen),
        )
    # before dataclasses: Flax structs keep static fields static
    registered = _registered(x, registry)
    if registered is not None:
        return registered
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = [f.name for f in dataclasses.fields(x) if hasattr(x, f.name)]
        return [f".{n}" for n in names], [getattr(x, n) for n in names], _refill_dataclass(x, names)
    return None  # other list and tuple subclasses (torch.Size, ...) are leaves


# --- walking with paths (explain_tree, and naming the leaves at fault) ------------------------
class _Frame:
    """A container being walked: its children, their path fragments, the values so far."""

    __slots__ = ("build", "children", "container", "key", "keys", "values")

    def __init__(self, container: Any, key: str, node: Node) -> None:
        self.container, self.key = container, key
        self.keys, self.children, self.build = node
        self.values: list[Any] = []


def _path(stack: list[_Frame], key: str) -> str:
    return "".join([frame.key for frame in stack]) + key


def _walk(
    tree: Any,
    visit: Callable[[str, Any, bool], Any],
    registry: Registry,
    *,
    rebuild: bool,
    enter: Callable[[str, Any], None] | None = None,
) -> Any:
    """`tree` rebuilt (or not) with `visit(path, leaf, is_tensor)` applied to every leaf, and
    `enter(path, container)` called on every container. A loop, not recursion: a structure
    thousands of levels deep is walked like any other (paths are joined only where needed)."""
    stack: list[_Frame] = []
    active: set[int] = set()
    x, key = tree, ""
    while True:
        if type(x) in SCALARS:
            value = visit(_path(stack, key), x, False)
        elif is_tensor(x, registry):
            value = visit(_path(stack, key), x, True)
        else:
            try:
                node = _node(x, registry)
                if node is not None and len(node[0]) != len(node[1]):
                    raise ValueError(f"{len(node[0])} keys for {len(node[1])} children")
            except AdapterError:  # a plugin's broken hook, not this structure's fault
                raise
            except Exception as exc:
                where = _path(stack, key) or "(root)"
                said = str(exc) if isinstance(exc, InteropError) else repr(exc)
                raise UnsupportedTensorError(
                    f"cannot take apart the {type(x).__qualname__} at {where}: {said}"
                ) from exc
            if node is None:
                value = visit(_path(stack, key), x, False)
            elif id(x) in active:
                where = _path(stack, key) or "(root)"
                raise UnsupportedTensorError(f"the structure contains itself at {where}")
            else:
                if enter is not None:
                    enter(_path(stack, key), x)
                frame = _Frame(x, key, node)
                if frame.children:
                    active.add(id(x))
                    stack.append(frame)
                    x, key = frame.children[0], frame.keys[0]
                    continue
                value = _rebuilt(frame, _path(stack, key)) if rebuild else x
        while stack:  # hand the value up; rebuild each container whose children are done
            frame = stack[-1]
            frame.values.append(value)
            done = len(frame.values)
            if done < len(frame.children):
                x, key = frame.children[done], frame.keys[done]
                break
            stack.pop()
            active.discard(id(frame.container))
            value = _rebuilt(frame, _path(stack, frame.key)) if rebuild else frame.container
        else:
            return value


def _rebuilt(frame: _Frame, path: str) -> Any:
    try:
        return frame.build(frame.values)
    except Exception as exc:
        raise UnsupportedTensorError(
            f"cannot rebuild the {type(frame.container).__qualname__} at {path or '(root)'}: "
            f"{exc!r}"
        ) from exc


def leaves(tree: Any, registry: Registry) -> Iterator[tuple[str, Any, bool]]:
    """Every leaf of `tree` in order, as (path, leaf, is_tensor), as `registry`'s adapters
    see them."""
    found: list[tuple[str, Any, bool]] = []
    _walk(tree, lambda p, leaf, t: found.append((p, leaf, t)), registry, rebuild=False)
    return iter(found)


# --- explain_tree ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LeafPlan:
    """What happens to one leaf: shared, copied (`plan` says why), refused (`error`) or kept as
    it is (not a tensor, or unsupported with `unsupported="keep"`)."""

    path: str
    status: str
    plan: Plan | None = None
    error: InteropError | None = None
    kind: str = ""
    #: path of an earlier leaf holding this same object (or, under `copy=True`, another object
    #: over the same memory, dtype, shape and strides): converted once, given to both
    same_as: str | None = None

    @property
    def why(self) -> str:
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        if self.status == COPIED and self.plan is not None:
            return "; ".join(self.plan.reasons)
        if self.status == KEPT:
            return f"not a tensor ({self.kind})"
        return ""


@dataclasses.dataclass(frozen=True)
class TreePlan:
    """Per leaf, by path, what `convert_tree` would do; `str()` sums it up for a person."""

    target: str
    leaves: tuple[LeafPlan, ...]

    def _with(self, status: str) -> tuple[LeafPlan, ...]:
        return tuple(leaf for leaf in self.leaves if leaf.status == status)

    @property
    def shared(self) -> tuple[LeafPlan, ...]:
        return self._with(SHARED)

    @property
    def copied(self) -> tuple[LeafPlan, ...]:
        return self._with(COPIED)

    @property
    def refused(self) -> tuple[LeafPlan, ...]:
        return self._with(REFUSED)

    @property
    def kept(self) -> tuple[LeafPlan, ...]:
        return self._with(KEPT)

    @property
    def zero_copy(self) -> bool:
        """Every tensor leaf is shared (nothing copied, nothing refused)."""
        return not self.copied and not self.refused

    def __getitem__(self, path: str) -> LeafPlan:
        for leaf in self.leaves:
            if leaf.path == path:
                return leaf
        raise KeyError(path)

    def __iter__(self) -> Iterator[LeafPlan]:
        return iter(self.leaves)

    def __len__(self) -> int:
        return len(self.leaves)

    def __str__(self) -> str:
        tensors = len(self.leaves) - len(self.kept)
        head = (
            f"convert_tree -> {self.target}: {tensors} tensor leaves: {len(self.shared)} "
            f"shared, {len(self.copied)} copied, {len(self.refused)} refused; "
            f"{len(self.kept)} other leaves kept as they are"
        )
        lines = [head]
        for title, group in (("copied", self.copied), ("refused", self.refused)):
            if group:
                lines.append(f"  {title}:")
                lines += _listed(group)
        kept = [leaf for leaf in self.kept if leaf.error is not None]
        if kept:
            lines.append("  kept although tensors (unsupported='keep'):")
            lines += _listed(tuple(kept))
        return "\n".join(lines)


def _listed(group: tuple[LeafPlan, ...], limit: int = 20) -> list[str]:
    lines = [f"    {leaf.path or '(root)'}: {leaf.why}" for leaf in group[:limit]]
    if len(group) > limit:
        lines.append(f"    ... and {len(group) - limit} more")
    return lines


def _check_options(copy: Any, device: Any, unsupported: Any) -> bool:
    """The tree calls' options, checked before any leaf is touched (a tree without tensors
    would otherwise take any value); returns whether leaves over one memory must be tied."""
    if not isinstance(unsupported, str) or unsupported not in (RAISE, KEEP):
        raise InvalidArgumentError(
            f"unsupported must be {RAISE!r} (refuse tensors the target cannot take) or "
            f"{KEEP!r} (return them as they are), not {unsupported!r}"
        )
    parse_device(device)  # a DeviceError naming the device
    return copy_flag(copy) is True


# --- leaves over one memory ----------------------------------------------------------------------
class _SameMemory:
    """Leaves that are distinct objects over one memory (a torch state dict's tied weights:
    `state_dict()` detaches each entry into a tensor of its own) with the same framework,
    device, dtype, shape and strides: under `copy=True` they get one result, as one object
    met twice does. Candidates share the adapter's cheap `fast_address`; `inspect` confirms
    them, so the export it costs is paid only where two addresses meet."""

    __slots__ = ("hub", "seen")

    def __init__(self, through: Calls) -> None:
        self.hub = through.hub
        #: (adapter, address), or the memory key where the adapter has no fast address ->
        #: [leaf, its memory key (None until needed), its value] per leaf met there
        self.seen: dict[Hashable, list[list[Any]]] = {}

    def find(self, x: Any) -> tuple[Hashable | None, list[Any] | None]:
        """(the slot `x` belongs to, the entry of an earlier leaf over its memory or None);
        slot None: no memory key for `x` (not an adapter's tensor, or its export fails)."""
        adapter = self.hub.registry.detect(x)
        if adapter is None:  # capsules and producers may export once only: not inspected
            return None, None
        try:
            if type(adapter).fast_address is FastPath.fast_address:
                slot: Hashable | None = self.key(adapter, x)
                return slot, (self.seen[slot][0] if slot in self.seen else None)
            slot = (adapter.name, int(adapter.fast_address(x)))
        except Exception:
            return None, None
        mine: Any = self
        for entry in self.seen.get(slot, ()):
            if entry[1] is None:
                entry[1] = self.key(adapter, entry[0])
            if mine is self:
                mine = self.key(adapter, x)
            if mine is not None and entry[1] == mine:
                return slot, entry
        return slot, None

    def add(self, slot: Hashable | None, x: Any, value: Any) -> None:
        if slot is not None:
            self.seen.setdefault(slot, []).append([x, None, value])

    def key(self, adapter: Adapter, x: Any) -> Hashable | None:
        """Everything that makes two tensors the same data: framework, device, dtype, shape,
        strides, first element, read-only flag; None for an empty tensor (its address is no
        memory) or one that cannot be inspected."""
        try:
            info = self.hub.inspect(x)
        except Exception:
            return None
        if not info.size:
            return None
        fields = info.device, info.dtype, info.shape, info.strides, info.address, info.read_only
        return (adapter.name, *fields)


def explain_tree(
    tree: Any,
    to: Any,
    through: Calls,
    copy: bool | None,
    device: Any,
    stream: Any,
    unsupported: str,
    dtypes: Any,
) -> TreePlan:
    """`interop.explain_tree`, made through `through` (each leaf by its `explain`)."""
    ties = _check_options(copy, device, unsupported)
    target = through.hub.target(to).name  # an unknown framework fails once, not once per leaf
    explain = through.explain
    found: list[LeafPlan] = []
    seen: dict[int, LeafPlan] = {}
    held: list[Any] = []  # every leaf in `seen`: alive, its id cannot name another leaf
    memory = _SameMemory(through) if ties else None

    def visit(path: str, leaf: Any, tensor: bool) -> Any:
        if not tensor:
            found.append(LeafPlan(path, KEPT, kind=type(leaf).__qualname__))
            return leaf
        earlier = seen.get(id(leaf))
        slot, tied = memory.find(leaf) if memory is not None and earlier is None else (None, None)
        if tied is not None:
            earlier = tied[2]
        if earlier is not None:
            found.append(dataclasses.replace(earlier, path=path, same_as=earlier.path))
            return leaf
        try:
            plan = explain(leaf, to, copy=copy, device=device, stream=stream, dtypes=dtypes)
            exc = plan.error
        except InteropError as raised:  # (arguments are checked before the walk)
            exc = raised
        if exc is None:
            status = SHARED if plan.zero_copy else COPIED
            entry = LeafPlan(path, status, plan, kind=plan.source)
        else:
            status = KEPT if unsupported == KEEP and isinstance(exc, UNSUPPORTED) else REFUSED
            entry = LeafPlan(path, status, error=bare(exc), kind=type(leaf).__qualname__)
        seen[id(leaf)] = entry
        held.append(leaf)
        if memory is not None:
            memory.add(slot, leaf, entry)
        found.append(entry)
        return leaf

    _walk(tree, visit, through.hub.registry, rebuild=False)
    return TreePlan(target, tuple(found))


# --- convert_tree ------------------------------------------------------------------------------
#: nesting the recursive walk goes through before it hands a subtree to the loop (`deep`): far
#: below the interpreter's recursion limit, far above any real structure's depth
_FAST_DEPTH = 48


class _Converter:
    """One `convert_tree` call's walk. A class, not closures: nested functions calling each
    other form a reference cycle that would keep every converted leaf alive until the cyclic
    garbage collector runs."""

    __slots__ = (
        "convert",
        "copy",
        "depth",
        "device",
        "done",
        "dtypes",
        "failed",
        "held",
        "keep",
        "memory",
        "registry",
        "stream",
        "tensors",
        "to",
    )

    def __init__(
        self,
        through: Calls,
        to: Any,
        copy: bool | None,
        device: Any,
        stream: Any,
        keep: bool,
        ties: bool,
        dtypes: Any = None,
    ) -> None:
        self.convert = through.convert
        self.registry = through.hub.registry
        self.to, self.copy, self.device, self.stream, self.keep = to, copy, device, stream, keep
        self.dtypes = dtypes
        #: results by id of their leaf: a leaf met twice is converted once
        self.done: dict[int, Any] = {}
        #: every leaf in `done`, alive for the walk: a registered node's flatten may hand out
        #: fresh leaves (row views), and a freed one's id could name the next one's result
        self.held: list[Any] = []
        #: under copy=True, results by memory too: tied weights of a state dict stay tied
        self.memory = _SameMemory(through) if ties else None
        #: the first failure, kept instead of raised: an exception unwinding through half-built
        #: containers would free converted leaves while it is in flight, and a deleter written
        #: in Python (the core's capsule_over and bridges) cannot run then. The object is the
        #: failing leaf, or the container that would not come apart, or None
        self.failed: list[tuple[Any, BaseException]] = []
        #: adapter-owned types met in this call: one set lookup per leaf
        self.tensors: set[type] = set()
        #: containers the recursive walk is inside
        self.depth = 0

    def leaf(self, x: Any) -> Any:
        done = self.done
        key = id(x)
        result = done.get(key, done)
        if result is done:
            if self.failed:
                return x  # stop converting; the slow pass names every failing leaf
            memory = self.memory
            slot, tied = memory.find(x) if memory is not None else (None, None)
            if tied is not None:
                result = tied[2]
            else:
                try:
                    result = self.convert(
                        x,
                        self.to,
                        copy=self.copy,
                        device=self.device,
                        stream=self.stream,
                        dtypes=self.dtypes,
                    )
                except UNSUPPORTED as exc:
                    if not self.keep:
                        self.failed.append((x, bare(exc)))
                        return x
                    result = x
                except Exception as exc:
                    self.failed.append((x, bare(exc)))
                    return x
                if memory is not None and result is not x:
                    memory.add(slot, x, result)
            done[key] = result
            self.held.append(x)
        return result

    def broken(self, x: Any, exc: BaseException) -> Any:
        """`x` as it is, with the failure recorded (the slow pass finds where it is)."""
        if not self.failed:
            self.failed.append((x, bare(exc)))
        return x

    def container(self, x: Any) -> Any:
        if self.depth >= _FAST_DEPTH:
            return self.deep(x)
        self.depth += 1
        try:
            node = _node(x, self.registry)
            result = x if node is None else node[2]([self.walk(child) for child in node[1]])
        except Exception as exc:  # a container that will not come apart or go back together
            result = self.broken(x, exc)
        self.depth -= 1
        return result

    def walk(self, x: Any) -> Any:
        kind = type(x)
        tensors, leaf, walk = self.tensors, self.leaf, self.walk
        if kind in tensors:
            return leaf(x)
        if kind is dict or kind is list or kind is tuple:
            if self.depth >= _FAST_DEPTH:
                return self.deep(x)
            self.depth += 1
            try:  # a dict changed by a leaf's producer stops its iteration here
                if kind is dict:
                    result: Any = {
                        k: leaf(v) if type(v) in tensors else walk(v) for k, v in x.items()
                    }
                else:
                    result = [leaf(v) if type(v) in tensors else walk(v) for v in x]
                    if kind is tuple:
                        result = tuple(result)
            except Exception as exc:
                result = self.broken(x, exc)
            self.depth -= 1
            return result
        if kind in SCALARS:
            return x
        if self.registry.detect(x) is not None:
            tensors.add(kind)
            return leaf(x)
        if is_tensor(x, self.registry):
            return leaf(x)
        return self.container(x)

    def deep(self, tree: Any) -> Any:
        """`walk` as a loop, for what lies deeper than `_FAST_DEPTH`: no recursion limit."""
        stack: list[_Frame] = []
        active: set[int] = set()
        x = tree
        while True:
            kind = type(x)
            if kind in SCALARS:
                value = x
            elif kind in self.tensors or is_tensor(x, self.registry):
                value = self.leaf(x)
            else:
                try:
                    node = _node(x, self.registry)
                except Exception as exc:
                    node, value = None, self.broken(x, exc)
                else:
                    value = x
                if node is not None and id(x) in active:
                    value = self.broken(x, UnsupportedTensorError("the structure contains itself"))
                elif node is not None:
                    frame = _Frame(x, "", node)
                    if frame.children:
                        active.add(id(x))
                        stack.append(frame)
                        x = frame.children[0]
                        continue
                    value = self.built(frame)
            while stack:
                frame = stack[-1]
                frame.values.append(value)
                done = len(frame.values)
                if done < len(frame.children):
                    x = frame.children[done]
                    break
                stack.pop()
                active.discard(id(frame.container))
                value = self.built(frame)
            else:
                return value

    def built(self, frame: _Frame) -> Any:
        try:
            return frame.build(frame.values)
        except Exception as exc:
            return self.broken(frame.container, exc)


def convert_tree(
    tree: Any,
    to: Any,
    through: Calls,
    copy: bool | None,
    device: Any,
    stream: Any,
    unsupported: str,
    dtypes: Any,
) -> Any:
    """`interop.convert_tree`, made through `through` (each leaf by its `convert`)."""
    ties = _check_options(copy, device, unsupported)
    through.hub.target(to)  # an unknown framework fails here, even for a tree without tensors
    walker = _Converter(through, to, copy, device, stream, unsupported == KEEP, ties, dtypes)
    try:
        result = walker.walk(tree)
    except RecursionError as exc:  # called with the interpreter's stack nearly full
        walker.failed.append((None, bare(exc)))
        result = None
    if not walker.failed:
        return result
    converted = set(walker.done)  # these worked (capsules among them consumed): not asked again
    result = None  # release every leaf converted so far, with no exception in flight
    walker.done.clear()
    walker.memory = None
    first = walker.failed[0]
    # walker.held keeps the converted leaves alive until here: their ids name no other leaf
    error = _explain_failure(
        tree, to, through, first, converted, copy, device, stream, walker.keep, dtypes=dtypes
    )
    del walker
    raise error


def _explain_failure(
    tree: Any,
    to: Any,
    through: Calls,
    cause: tuple[Any, BaseException],
    converted: set[int],
    copy: bool | None,
    device: Any,
    stream: Any,
    keep: bool,
    dtypes: Any = None,
) -> BaseException:
    """Every leaf that fails, by path: the one that stopped the fast pass with its own error,
    the others as `explain` refuses them (without moving any data); or the container that
    would not be walked, by path."""
    failed_at, first_error = cause
    failures: list[tuple[str, BaseException]] = []
    checked: dict[int, BaseException | None] = {}
    held: list[Any] = []  # every leaf in `checked`, alive: ids are not reused
    container: list[str] = []
    total = 0

    def visit(path: str, leaf: Any, tensor: bool) -> Any:
        nonlocal total
        if not tensor:
            return leaf
        total += 1
        key = id(leaf)
        if key not in checked:
            error: BaseException | None = None
            if failed_at is not None and leaf is failed_at:
                error = first_error
            elif key not in converted:
                try:
                    refusal = through.explain(
                        leaf, to, copy=copy, device=device, stream=stream, dtypes=dtypes
                    ).error
                except InteropError as exc:
                    refusal = exc
                if refusal is not None:
                    error = None if keep and isinstance(refusal, UNSUPPORTED) else bare(refusal)
            checked[key] = error
            held.append(leaf)
        if checked[key] is not None:
            failures.append((path, checked[key]))  # type: ignore[arg-type]
        return leaf

    def enter(path: str, node: Any) -> None:
        if failed_at is not None and node is failed_at and not container:
            container.append(path)

    try:
        _walk(tree, visit, through.hub.registry, rebuild=True, enter=enter)
    except InteropError as exc:  # the structure itself is at fault (a cycle, a rebuild)
        return exc
    if container:  # a container that failed while it was walked, not on a second look
        where = container[0] or "(root)"
        kind = type(failed_at).__qualname__
        walked = UnsupportedTensorError(
            f"convert_tree: the {kind} at {where} failed while it was walked: "
            f"{type(first_error).__name__}: {first_error}; nothing was returned (leaves already "
            "converted were released). A container that changes during the call (a leaf's "
            "producer or the container's own methods modifying it) cannot be converted: "
            "convert a copy that nothing modifies"
        )
        walked.__cause__ = first_error
        walked.failures = ((container[0], first_error),)  # type: ignore[attr-defined]
        return walked
    if not failures:  # not a leaf's fault that explain can see: say where it happened
        return _wrap(
            first_error, f"convert_tree failed: {type(first_error).__name__}: {first_error}"
        )
    where = "\n  ".join(f"{p or '(root)'}: {type(e).__name__}: {e}" for p, e in failures)
    message = (
        f"convert_tree: {len(failures)} of {total} tensor leaves cannot be converted as asked; "
        f"nothing was returned (leaves already converted were released):\n  {where}"
    )
    error = _wrap(failures[0][1], message)
    error.failures = tuple(failures)  # type: ignore[attr-defined]
    return error


def _wrap(error: BaseException, message: str) -> InteropError:
    """An error of `error`'s own type (so `except CopyForbiddenError` still works) with
    `message`; raw exceptions become UnsupportedTensorError."""
    kind = type(error) if isinstance(error, InteropError) else UnsupportedTensorError
    try:
        wrapped = kind(message)
    except Exception:  # a subclass with another signature
        wrapped = UnsupportedTensorError(message)
    wrapped.__cause__ = error
    return wrapped


# --- the hint for convert/explain/inspect given a structure ------------------------------------
def container_error(x: Any, registry: Registry) -> UnsupportedTensorError | None:
    """The error for `convert(structure)`: it points at convert_tree when tensors are inside
    (as `registry`'s adapters see them). The default hub's `structure_error` (`interop.api`)."""
    if not isinstance(x, (dict, list, tuple, collections.deque)) and not (
        dataclasses.is_dataclass(x) and not isinstance(x, type)
    ):
        try:
            if _registered(x, registry) is None:  # a pytree node an adapter knows (Flax, Equinox)
                return None
        except Exception:
            return None
    try:
        paths = [path for path, _, tensor in leaves(x, registry) if tensor]
    except InteropError:
        paths = []
    kind = type(x).__qualname__
    if not paths:
        return UnsupportedTensorError(
            f"a {kind} is not a tensor, and it holds no tensors (interop.convert, explain and "
            "inspect take one tensor); make it one first, such as numpy.asarray(x)"
        )
    shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
    return UnsupportedTensorError(
        f"interop.convert, explain and inspect take one tensor; this {kind} is a structure "
        f"holding {len(paths)} tensor(s) ({shown}): use interop.convert_tree(x, to) or "
        "interop.explain_tree(x, to) to convert or explain every leaf"
    )
