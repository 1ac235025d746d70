"""The failures particular to gradients across frameworks, in the library's hierarchy.

Defined here rather than in `interop/errors.py` because that module belongs to the core; the
lead may move them there (the names and bases are meant to stay).
"""

from __future__ import annotations

from ..errors import InteropError


class BridgedFunctionError(InteropError, RuntimeError):
    """The wrapped function raised while running in its own framework; the original exception
    is chained as `__cause__` and the message names the function and the framework."""


class UnsupportedTransformError(InteropError, NotImplementedError):
    """A transformation this design cannot carry: forward-mode autodiff (`jax.jvp`/`jacfwd`,
    torch forward AD, `torch.func.jvp`), `torch.func.vmap`, `tf.function(jit_compile=True)`."""


class OutSpecError(InteropError, ValueError):
    """The outputs' shapes and dtypes could not be known ahead (pass `out_spec`), or the
    function returned something other than what `out_spec` announced."""
