"""Four small numerical functions written once per framework: the code under test.

Each framework's module (`xops.numpy_ops`, `xops.torch_ops`, `xops.jax_ops`,
`xops.tensorflow_ops`) defines `softmax`, `logsumexp`, `layer_norm` and `conv1d` with the same
meaning; `IMPLEMENTATIONS` finds a framework's module by its name as interop names it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

FRAMEWORKS = ("numpy", "torch", "jax", "tensorflow")


def ops(framework: str) -> ModuleType:
    """The module implementing the functions with `framework`'s own API."""
    return importlib.import_module(f"xops.{framework}_ops")
