"""The framework a wrapped function is called from, and whose autodiff differentiates it.

`Target` is the base class an adapter's `grad_target()` hook returns a subclass of. Typically
`apply` wraps the bridge in the framework's own custom-gradient mechanism (a custom autograd
function, a custom VJP rule), built once per bridge and kept in `bridge.state`: its forward is
`bridge.run` or `bridge.forward`, its backward the pullback `bridge.forward` gave or, where the
framework differentiates the backward itself (higher orders), `self.apply(bridge.backward(),
...)`. The JAX, torch and TensorFlow targets live in their adapters (`interop_jax.grad`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .bridged import BridgedFunction
from .structure import dtype_name


class Target:
    """What `interop.wrap` needs from the framework a wrapped function is called from
    (subclassed by adapters: `tensor_types` and `apply` are required)."""

    #: the adapter's name (bridges convert the source's outputs `to=` it)
    name = ""
    #: True when the framework's VJP is `c·conj(J)` (torch, TensorFlow), False for JAX's `c·J`.
    conj_vjp = True

    def tensor_types(self) -> tuple[type, ...]:
        """The argument leaves that are tensors (converted to the source); other leaves are
        passed to `fn` as they are."""
        raise NotImplementedError

    def prepare(self, x: Any) -> Any:
        """A tensor argument as `apply` takes it (TensorFlow: a Variable's value)."""
        return x

    def dtype(self, x: Any) -> str:
        return dtype_name(x.dtype)

    def apply(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
        """The bridged function of `xs`, recorded by this framework's autodiff."""
        raise NotImplementedError

    def adopt(self, wrapped: Any) -> None:
        """Called once for each function wrapped with this target."""

    def compiling(self) -> bool:
        """Whether this framework's compiler is tracing the caller (torch.compile)."""
        return False

    def compiled(self, wrapped: Any, args: tuple[Any, ...]) -> Any:
        """`wrapped(*args)` as the compiler traces it (only called where `compiling()`)."""
        raise NotImplementedError

    def value_and_grad(self, fn: Callable[[Any], Any], x: Any) -> tuple[Any, Any]:
        """`fn(x)` (a 0-d tensor of this framework) and its gradient with respect to `x`, both
        found by this framework's own autodiff: how the conformance kit differentiates wrapped
        functions (nothing else calls it)."""
        raise NotImplementedError
