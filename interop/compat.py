"""The 1.x shim: adapters written for contract 1.0 or 1.1 still load under contract 2.x.

A 1.x adapter subclassed one fat base class and overrode the hooks it needed (NumPy's host
copier was found by the adapter's name, and its hooks with `getattr`). The registry hands such
an adapter to `upgrade`, which reads its class once and wraps it into a 2.0 adapter that
declares each role (`interop.roles`) whose hooks the old class implements and forwards those
hooks and the core to it. `interop list` says the adapter is contract 1.x (`written_for`).

`AdapterV1` is the base class a 1.x plugin saw: the 2.0 core with every role of contract 1.1
(kept for plugins that subclass it, and for the tests' 1.x fixture).
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import roles
from .adapter import CONTRACT_VERSION, Adapter, Capabilities


class AdapterV1(
    Adapter,
    roles.FastPath,
    roles.ImportRefusals,
    roles.ExportHazards,
    roles.WritableImports,
    roles.Tracing,
    roles.Devices,
    roles.Streams,
    roles.Testing,
    roles.Sharding,
    roles.Gradients,
    roles.PytreeNodes,
):
    """The adapter base class of contract 1.1: every hook, each with its default (all roles
    but the services, which were hooks of NumPy's adapter alone, found by its name)."""

    contract: ClassVar[tuple[int, int] | None] = (1, 1)


_CORE_NAMES = ("name", "aliases", "modules", "distributions", "supported_versions")


def implemented(cls: type) -> tuple[type[roles.Role], ...]:
    """The roles whose hooks a 1.x adapter class implements (overrides or, for the hooks
    that were NumPy's alone, defines)."""
    return tuple(
        role for role in roles.ROLES if any(roles.overrides(cls, role, hook) for hook in role.hooks)
    )


class Shimmed(Adapter):
    """A 1.x adapter as a 2.0 one: the core forwarded to it (`inner`)."""

    contract = CONTRACT_VERSION

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        #: the contract the wrapped adapter was written for (what `interop list` says)
        self.written_for: tuple[int, int] = inner.contract or (1, 0)

    def __getattr__(self, name: str) -> Any:  # the plugin's own attributes, for its users
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def installed(self) -> bool:
        return self.inner.installed()

    def framework_distribution(self) -> tuple[str, str] | None:
        return self.inner.framework_distribution()

    def unavailable(self) -> str | None:
        return self.inner.unavailable()

    def imported(self) -> bool:
        return self.inner.imported()

    def import_framework(self) -> Any:
        return self.inner.import_framework()

    def tensor_types(self) -> tuple[type, ...]:
        return self.inner.tensor_types()

    def owns(self, x: object) -> bool:
        return self.inner.owns(x)

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def export(self, x: Any, *, writable: bool = False) -> Any:
        return self.inner.export(x, writable=writable)

    def from_dlpack(self, source: Any) -> Any:
        return self.inner.from_dlpack(source)

    def copy(self, x: Any) -> Any:
        return self.inner.copy(x)


def _forward(hook: str) -> Any:
    def forward(self: Shimmed, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, hook)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = hook
    return forward


def upgrade(old: Adapter) -> Adapter:
    """`old`, an adapter written for contract 1.x, as a 2.0 adapter declaring the roles whose
    hooks it implements (read once, here: the core then finds them by declaration)."""
    cls = type(old)
    taken = implemented(cls)
    namespace: dict[str, Any] = {n: getattr(old, n) for n in _CORE_NAMES}
    for role in taken:
        for hook in role.hooks:
            if not roles.overrides(cls, role, hook):
                continue  # the role's default stays (a default the core may compare against)
            value = getattr(cls, hook)
            namespace[hook] = _forward(hook) if callable(roles.role_default(role, hook)) else value
    namespace["__module__"] = cls.__module__
    shim = type(cls.__name__, (Shimmed, *taken), namespace)
    return shim(old)


def written_for(adapter: Adapter) -> tuple[int, int]:
    """The contract `adapter` was written for (a shimmed one's own, else its `contract`)."""
    if isinstance(adapter, Shimmed):
        return adapter.written_for
    return adapter.contract or CONTRACT_VERSION
