"""Adapter contract 2.0: optional roles found by declaration, never by a framework's name; a
1.x adapter loads through the shim; contract errors name the attribute or role at fault."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from test_grad_plugins import run  # (a script's last JSON line; tests/ is on the path)

import interop
from interop import roles
from interop.compat import AdapterV1, Shimmed
from interop.registry import Registry

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def caps() -> interop.Capabilities:
    return interop.Capabilities(frozenset({"float32"}), frozenset({"float32"}))


class Core(interop.Adapter):
    """The required core alone, of a framework that is never imported."""

    name, modules, contract = "corefw", ("corefw_absent",), (2, 0)

    def tensor_types(self) -> tuple[type, ...]:
        return ()

    def capabilities(self) -> interop.Capabilities:
        return caps()


# --- roles found by declaration ------------------------------------------------------------
def test_the_host_copier_is_whoever_declares_it_not_the_adapter_named_numpy():
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    got = run(
        """
        import dataclasses, json, sys, types
        import torch, interop
        from interop.roles import HostCopier
        from interop_numpy import NumpyAdapter
        from interop_numpy.host_copy import host_copy

        out = {}
        real = NumpyAdapter()

        class NumpyWithoutCopier(interop.Adapter):  # named numpy, NumPy's core, no HostCopier
            name, aliases, modules, contract = "numpy", ("np",), ("numpy",), (2, 0)
            tensor_types, export, from_dlpack, copy = (
                real.tensor_types, real.export, real.from_dlpack, real.copy
            )

            def capabilities(self):
                return dataclasses.replace(real.capabilities(), writable_legacy_import=False)

        def cast():
            x = torch.arange(6, dtype=torch.float64)
            try:
                y = interop.convert(x, "torch", dtypes={"float64": "float32"})
            except interop.InteropError as exc:
                return type(exc).__name__ + (": HostCopier" if "HostCopier" in str(exc) else "")
            return [str(y.dtype), y.tolist(), y.data_ptr() != x.data_ptr()]

        interop.register(NumpyWithoutCopier(), replace=True)
        out["no holder"] = cast()

        class HostFw(interop.Adapter, HostCopier):  # another name, NumPy's copier
            name, modules, contract = "hostfw", ("hostfw",), (2, 0)
            calls = 0
            tensor_types = lambda self: ()
            capabilities = lambda self: interop.Capabilities(frozenset(), frozenset())

            def host_copy(self, source, dtype=None):
                HostFw.calls += 1
                return host_copy(source, dtype)

        sys.modules["hostfw"] = types.ModuleType("hostfw")
        interop.register(HostFw())
        out["holder"] = cast()
        out["calls"] = HostFw.calls
        print(json.dumps(out))
        """
    )
    assert got["no holder"] == "FrameworkNotInstalledError: HostCopier"
    assert got["holder"] == ["torch.float32", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], True]
    assert got["calls"] == 1


def test_role_holder_asks_declarations_and_follows_registrations(monkeypatch):
    pytest.importorskip("numpy")
    registry = Registry()
    holder = registry.role_holder(roles.HostCopier)
    assert holder is not None and holder.name == "numpy"
    assert roles.HostCopier in registry.roles_of(holder)
    assert registry.role_holder(roles.AlignedAllocator) is holder  # NumPy's, declared
    assert registry.role_holder(roles.CapsuleBoxes) is holder
    torch = registry.get("torch")
    assert roles.HostCopier not in registry.roles_of(torch)
    assert {roles.Sharding, roles.Gradients, roles.PytreeNodes} <= set(registry.roles_of(torch))

    class Boxes(Core, roles.CapsuleBoxes):
        name = "aaboxes"  # sorts before numpy: loaded adapters are asked by name

        def capsule_boxes(self, releases: Any) -> Any:
            return None

    boxes = Boxes()
    registry.register(boxes)
    assert registry.role_holder(roles.CapsuleBoxes) is holder  # NumPy is imported, aaboxes not
    monkeypatch.setitem(sys.modules, "aaboxes", types.ModuleType("aaboxes"))
    registry.register(Core(), replace=False)  # (any registration: holders are found again)
    assert registry.role_holder(roles.CapsuleBoxes) is boxes
    assert registry.role_holder(roles.HostCopier) is holder


def test_undeclared_roles_behave_as_their_defaults_and_are_not_asked():
    core = Core()
    assert roles.declared(Core) == ()
    assert core.fingerprint(object()) is None and core.sharded() is None
    assert core.export_hazard(object()) == "" and core.route_guards == ()
    from interop.grad import _hook
    from interop.sharding.kinds import hook_of

    class Loud(Core):  # a 2.0 class cannot define these unless declared; planted here
        pass

    Loud.sharded = lambda self: pytest.fail("asked without Sharding")  # type: ignore[method-assign]
    Loud.grad_source = lambda self: pytest.fail("asked")  # type: ignore[method-assign]
    assert hook_of(Loud()) is None
    assert _hook(Loud(), "source") is None


def test_a_role_mixed_in_below_a_filled_class_keeps_its_hooks():
    class Fast(roles.FastPath):
        def fingerprint(self, x: Any) -> Any:
            return "mine"

    class Both(Core, Fast):  # Core was given FastPath's defaults when it was made
        pass

    assert Both().fingerprint(1) == "mine"
    assert Core().fingerprint(1) is None
    assert roles.role_problems(Both) == []


# --- contract errors name the attribute or role at fault ------------------------------------
def test_a_hook_without_its_role_declared_is_refused_naming_the_role():
    class Sneaky(Core):
        name = "sneakyfw"

        def fingerprint(self, x: Any) -> Any:
            return 1

    with pytest.raises(
        interop.AdapterError, match=r"Sneaky\.fingerprint is a hook of the FastPath"
    ):
        Registry().register(Sneaky())


def test_a_declared_role_without_its_required_hook_is_refused_naming_it():
    class Claims(Core, roles.HostCopier):
        name = "claimsfw"

    with pytest.raises(
        interop.AdapterError, match=r"declares the HostCopier role but does not implement "
    ) as caught:
        Registry().register(Claims())
    assert "HostCopier.host_copy" in str(caught.value)


def test_a_capability_needing_a_role_names_it():
    class Marks(Core):
        name = "marksfw"

        def capabilities(self) -> interop.Capabilities:
            return interop.Capabilities(
                frozenset({"float32"}),
                frozenset({"float32"}),
                legacy_import_read_only=True,
                writable_legacy_import=True,
            )

    with pytest.raises(interop.AdapterError, match=r"writable_legacy_import needs the Writable"):
        Registry().register(Marks())


# --- the 1.x shim ------------------------------------------------------------------------
def test_a_1x_adapter_subclassing_interop_adapter_is_wrapped_with_the_roles_it_implements():
    class Old(interop.Adapter):  # as a 1.x plugin wrote it: hooks overridden, no roles
        name, modules, contract = "oldfw", ("oldfw_absent",), (1, 1)
        route_guards = (("is_neg", {False}),)
        calls = 0

        def tensor_types(self) -> tuple[type, ...]:
            return ()

        def capabilities(self) -> interop.Capabilities:
            return caps()

        def fingerprint(self, x: Any) -> Any:
            Old.calls += 1
            return ("key", x)

        def device_unavailable(self, device: Any) -> str | None:
            return "never here"

    registry = Registry()
    old = Old()
    registry.register(old)
    loaded = registry.get("oldfw")
    assert isinstance(loaded, Shimmed) and loaded.inner is old
    assert loaded.contract == (2, 1) and loaded.written_for == (1, 1)
    assert registry.roles_of(loaded) == (roles.FastPath, roles.Devices)
    assert loaded.fingerprint(3) == ("key", 3) and Old.calls == 1  # forwarded
    assert loaded.route_guards == (("is_neg", {False}),)
    assert type(loaded).fast_address is roles.FastPath.fast_address  # not claimed cheap
    assert loaded.device_unavailable(interop.Device("cpu", 0)) == "never here"
    info = next(i for i in registry.infos() if i.name == "oldfw")
    assert info.contract == "1.1 (through the 1.x shim)"
    assert info.roles == ("FastPath", "Devices")


def test_the_1x_mlx_adapter_loads_through_the_shim_and_converts():
    pytest.importorskip("numpy")
    pytest.importorskip("mlx.core")
    got = run(
        f"""
        import io, json, sys
        from contextlib import redirect_stdout
        sys.path.insert(0, {str(FIXTURES)!r})
        import numpy as np
        import mlx.core as mx
        import interop
        from interop.cli import main
        from interop.sources import buffer_address
        from mlx_1x import MLXAdapter

        interop.register(MLXAdapter(), replace=True)
        out = {{}}
        info = next(i for i in interop.adapters() if i.name == "mlx")
        out["info"] = [info.status, info.contract, list(info.roles)]
        text = io.StringIO()
        with redirect_stdout(text):
            main(["list"])
        out["list"] = next(l for l in text.getvalue().splitlines() if l.startswith("mlx "))
        from interop.registry import REGISTRY

        adapter = REGISTRY.get("mlx")
        out["shimmed"] = [type(adapter).__mro__[1].__name__, type(adapter.inner).__module__]

        # out of MLX: zero-copy, read back by address and values
        x = mx.arange(12, dtype=mx.float32).reshape(3, 4)
        y = interop.convert(x, "numpy")
        out["shared"] = y.ctypes.data == buffer_address(memoryview(x))
        out["values"] = bool(np.array_equal(y, np.array(memoryview(x))))
        # into MLX: float64 through its raw bits, used by MLX's own kernels
        a = np.linspace(0.0, 1.0, 7) ** 3
        m = interop.convert(a, "mlx")
        out["into"] = [str(m.dtype), bool(mx.array_equal(m + m, mx.array(a + a, dtype=mx.float64)))]
        out["bits"] = np.array(memoryview(m)).tobytes() == a.tobytes()
        # a dtype MLX lacks is refused with the reason the 1.x adapter declared
        try:
            interop.convert(np.ones(2, dtype=np.complex128), "mlx")
        except interop.UnsupportedDTypeError as exc:
            out["refused"] = "complex128" in str(exc)
        print(json.dumps(out))
        """
    )
    assert got["info"] == ["loaded", "1.1 (through the 1.x shim)", ["Devices", "Testing"]]
    assert " 1.1 (shim) " in got["list"]
    assert got["shimmed"] == ["Shimmed", "mlx_1x"]
    assert got["shared"] and got["values"]
    assert got["into"] == ["mlx.core.float64", True] and got["bits"]
    assert got["refused"]


def test_the_1x_base_class_has_every_hook_contract_1_1_had():
    later = {roles.StandIns}  # roles that came after 1.1: defaults filled, never declared
    assert set(roles.declared(AdapterV1)) == set(roles.ROLES) - set(roles.SERVICES) - later
    assert AdapterV1.contract == (1, 1)


def test_the_1x_mlx_adapter_passes_the_kit_through_the_shim():
    pytest.importorskip("numpy")
    pytest.importorskip("mlx.core")
    got = run(
        f"""
        import json, sys, warnings
        sys.path.insert(0, {str(FIXTURES)!r})
        warnings.simplefilter("error", RuntimeWarning)  # (cases run here, not in the worker)
        from interop.testing import check
        from mlx_1x import MLXAdapter

        report = check(
            MLXAdapter(),
            against=("numpy",),
            dtypes=("float32", "int64", "bool"),
            shapes=((3, 4), (0,)),
            layouts=("contiguous", "transposed"),
            raise_on_failure=False,
        )
        print(json.dumps({{"ok": report.ok, "text": str(report)}}))
        """
    )
    assert got["ok"], got["text"]
    assert " passed" in got["text"] and "0 failed" in got["text"], got["text"]
