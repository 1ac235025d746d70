"""torch's pytree registry as tree nodes for `interop.convert_tree` (the `tree_node` hook).

A class registered with `torch.utils._pytree` is taken apart by its own flatten function and
rebuilt by its unflatten; its children are named by its keyed flatten when it has one (".a",
"['w']"), else by position. torch is read from `sys.modules`, never imported: the core asks
only while torch is imported.
"""

from __future__ import annotations

import sys
from typing import Any

from interop.roles import TreeNode
from interop.tree import fragment


def node(x: Any) -> TreeNode | None:
    """`x`'s children, their path fragments and a rebuild through torch's registry, or None
    when `x`'s type is not registered there."""
    pytree = sys.modules.get("torch.utils._pytree")
    registered = pytree.SUPPORTED_NODES.get(type(x)) if pytree is not None else None
    if registered is None:
        return None
    children, context = registered.flatten_fn(x)
    if registered.flatten_with_keys_fn is not None:
        pairs = registered.flatten_with_keys_fn(x)[0]
        keys = [fragment(str, key, i) for i, (key, _) in enumerate(pairs)]
    else:
        keys = [f"[{i}]" for i in range(len(children))]
    return keys, list(children), lambda values: registered.unflatten_fn(values, context)
