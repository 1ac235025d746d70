"""Nested arguments as flat leaves, and output specs as (shape, dtype name) pairs.

A wrapped function takes and returns tuples, lists and dicts of tensors; the bridge works on
flat lists of tensors. The structure is described by a hashable `TreeDef` so that everything
built for one structure (JAX's custom rule, TF's custom gradient) is built once and reused.
Standard library only: the core imports no framework at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

LEAF = "*"
#: Dtypes a gradient flows to, in every target (floating and complex; not float8).
DIFFERENTIABLE = frozenset("float16 bfloat16 float32 float64 complex64 complex128".split())


class TreeDef(NamedTuple):
    """One node: its kind (`LEAF`, or the container type), dict keys, and children."""

    kind: Any
    keys: tuple[Any, ...]
    children: tuple[TreeDef, ...]

    def paths(self, prefix: str = "") -> Iterator[str]:
        """The path of every leaf, in flattening order, as `[0]['w']` would index it."""
        if self.kind == LEAF:
            yield prefix
            return
        for key, child in zip(self.keys, self.children, strict=True):
            yield from child.paths(f"{prefix}[{key!r}]")


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """Leaves in order (dicts in their own key order) and the structure around them."""
    leaves: list[Any] = []

    def walk(node: Any) -> TreeDef:
        if isinstance(node, (tuple, list)) and not hasattr(node, "_fields"):
            return TreeDef(type(node), tuple(range(len(node))), tuple(walk(c) for c in node))
        if isinstance(node, tuple):  # a namedtuple: rebuilt by field
            fields = tuple(getattr(node, "_fields", ()))
            return TreeDef(type(node), fields, tuple(walk(c) for c in node))
        if isinstance(node, dict):
            keys = tuple(node)
            return TreeDef(type(node), keys, tuple(walk(node[k]) for k in keys))
        leaves.append(node)
        return TreeDef(LEAF, (), ())

    return leaves, walk(tree)


def unflatten(treedef: TreeDef, leaves: list[Any] | tuple[Any, ...]) -> Any:
    """The structure `treedef` describes, holding `leaves` in order."""
    items = iter(leaves)

    def build(node: TreeDef) -> Any:
        if node.kind == LEAF:
            return next(items)
        children = [build(c) for c in node.children]
        if issubclass(node.kind, dict):
            made = node.kind.__new__(node.kind)
            made.update(zip(node.keys, children, strict=True))
            return made
        if issubclass(node.kind, tuple) and hasattr(node.kind, "_fields"):
            return node.kind(*children)
        return node.kind(children)

    return build(treedef)


class TensorSpec(NamedTuple):
    """A tensor's shape and dtype name ("float32", "complex64", "bfloat16", ...)."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def differentiable(self) -> bool:
        return self.dtype in DIFFERENTIABLE


#: dtype names by (type, dtype): NumPy's `dtype.name` (JAX's dtypes too) is Python code that
#: takes 2 µs, asked for every input and output of every bridged call
_NAMES: dict[tuple[type, Any], str] = {}
MAX_NAMES = 1024


def dtype_name(dtype: Any) -> str:
    """The name of a NumPy, JAX, TensorFlow or torch dtype, or of a dtype given by name."""
    try:
        return _NAMES[type(dtype), dtype]
    except KeyError:
        name = _name(dtype)
    except TypeError:  # an unhashable dtype-like
        return _name(dtype)
    if len(_NAMES) < MAX_NAMES:
        _NAMES[type(dtype), dtype] = name
    return name


def _name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype.removeprefix("torch.")
    numpy_dtype = getattr(dtype, "as_numpy_dtype", None)  # tf.DType
    if numpy_dtype is not None:
        return str(dtype.name)
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    return str(dtype).removeprefix("torch.")


def to_spec(leaf: Any) -> TensorSpec:
    """A spec from anything with `.shape` and `.dtype`, or a `(shape, dtype)` pair."""
    if isinstance(leaf, TensorSpec):
        return leaf
    if isinstance(leaf, tuple) and len(leaf) == 2 and not hasattr(leaf, "shape"):
        shape, dtype = leaf
    else:
        shape, dtype = leaf.shape, leaf.dtype
    if any(d is None for d in shape):  # (a tf.TensorSpec, a symbolic TF tensor's shape)
        raise TypeError(
            f"a leaf of shape {tuple(shape)} has a dimension of unknown size: give every "
            "size, as a callable of the arguments if sizes vary, or leave out_spec out where "
            "the source infers them"
        )
    return TensorSpec(tuple(int(d) for d in shape), dtype_name(dtype))


def is_spec_leaf(node: Any) -> bool:
    """True for what `to_spec` reads as one leaf (a pair of shape and dtype is not a tuple node)."""
    if hasattr(node, "shape") and hasattr(node, "dtype"):
        return True
    return (
        isinstance(node, tuple)
        and len(node) == 2
        and isinstance(node[0], (tuple, list))
        and not isinstance(node[1], (tuple, list, dict))
    )


def flatten_specs(tree: Any) -> tuple[list[TensorSpec], TreeDef]:
    """An `out_spec` structure as flat specs and its structure (None leaves stay None)."""
    leaves: list[Any] = []

    def walk(node: Any) -> TreeDef:
        if node is None or is_spec_leaf(node):
            leaves.append(None if node is None else to_spec(node))
            return TreeDef(LEAF, (), ())
        if isinstance(node, dict):
            keys = tuple(node)
            return TreeDef(type(node), keys, tuple(walk(node[k]) for k in keys))
        if isinstance(node, (tuple, list)):
            keys = tuple(node._fields) if hasattr(node, "_fields") else tuple(range(len(node)))
            return TreeDef(type(node), keys, tuple(walk(c) for c in node))
        raise TypeError(f"out_spec leaf {node!r} has no shape and dtype")

    treedef = walk(tree)
    return leaves, treedef


def static_key(values: list[Any]) -> Any:
    """A cache key for the non-tensor leaves, with types kept apart (1, 1.0 and True differ);
    None when one of them cannot be hashed by value."""
    key = tuple((type(v), v) for v in values)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def name_of(fn: Callable[..., Any]) -> str:
    """How an error names the user's function."""
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{qualname}" if module and module != "builtins" else str(qualname)
