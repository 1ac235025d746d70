"""JAX's pytree registry as tree nodes for `interop.convert_tree` (the `tree_node` hook).

A container JAX's registry knows (a Flax struct, an Equinox module, a class registered with
`register_pytree_node`) is taken apart one level at a time by JAX itself, so its static fields
stay static and it is rebuilt by its own unflatten. Only the node's own level is flattened
(`is_leaf` stops at every child); what JAX takes for a leaf is not a node. JAX is read from
`sys.modules`, never imported: the core asks only while JAX is imported.
"""

from __future__ import annotations

import sys
from typing import Any

from interop.roles import TreeNode
from interop.tree import fragment


def _keypath(keys: Any) -> str:
    return "".join(str(k) for k in keys)


def node(x: Any) -> TreeNode | None:
    """`x`'s children with their key paths (".params", "['w']", "[0]") and JAX's unflatten,
    or None when JAX takes `x` for a leaf."""
    tree_util = sys.modules.get("jax.tree_util")
    if tree_util is None:  # jax is being imported
        return None
    pairs, treedef = tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return None  # a leaf to JAX
    keys = [fragment(_keypath, tuple(path), i) for i, (path, _) in enumerate(pairs)]
    return keys, [child for _, child in pairs], treedef.unflatten
