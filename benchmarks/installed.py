"""The frameworks a run measures: usable adapters, each with its entry in the route table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import frameworks as fws
from .env import import_order


@dataclass
class Framework:
    """An installed, usable adapter and its direct routes (`spec`, from frameworks.py)."""

    name: str  # the adapter's name, as `to=` takes it
    module: str
    adapter: Any
    spec: fws.Spec

    def make(self, n: int) -> Any:
        """A contiguous, 64-byte aligned float32 tensor of `n` elements."""
        return self.spec.make(n)

    def address(self, x: Any) -> int | None:
        """The data address through the framework's own API (None: it cannot tell)."""
        try:
            return int(self.adapter.data_address(x))
        except Exception:
            return None


def discover(only: list[str] | None = None) -> tuple[list[Framework], dict[str, str]]:
    """Usable frameworks (adapter loaded, framework importable, listed in frameworks.py),
    sorted by name, and why each of the others is left out."""
    import interop
    from interop.registry import REGISTRY

    infos = {info.name: info for info in interop.adapters() if not only or info.name in only}
    skipped: dict[str, str] = {}
    modules: dict[str, str] = {}
    for name, info in infos.items():
        if info.status != "loaded":
            skipped[name] = f"adapter {info.status}" + (f": {info.error}" if info.error else "")
            continue
        adapter = REGISTRY.get(name)
        why = adapter.unavailable()
        if why:
            skipped[name] = why
        elif adapter.modules[0] not in fws.SPECS:
            skipped[name] = "no entry in benchmarks/frameworks.py"
        else:
            modules[name] = adapter.modules[0]
    found = []
    order = import_order(list(modules.values()))  # Paddle before TensorFlow
    for name in sorted(modules, key=lambda n: order.index(modules[n])):
        try:
            spec = fws.SPECS[modules[name]]()
        except Exception as exc:  # the framework does not import here (MXNet without shim...)
            skipped[name] = f"cannot import {modules[name]}: {error_text(exc)}"
            continue
        found.append(Framework(name, modules[name], REGISTRY.get(name), spec))
    if only:
        for name in set(only) - set(infos):
            skipped[name] = "no such adapter"
    found.sort(key=lambda f: f.name)
    return found, skipped


def namespace(*frameworks: Framework) -> dict[str, Any]:
    """The names the frameworks' route code runs in."""
    names: dict[str, Any] = {}
    for fw in frameworks:
        names.update(fw.spec.names)
    return names


def error_text(exc: BaseException) -> str:
    """An exception in one line, for a table cell."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:160] if lines else ''}"
