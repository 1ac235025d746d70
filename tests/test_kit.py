"""The conformance kit's own machinery: which hook failed, how the worker makes an adapter
registered at run time, and true skip reasons (docs/plugins.md, Quick start)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from typing import Any

import pytest

from interop.adapter import Adapter
from interop.errors import UnsupportedTensorError
from interop.testing.hooks import HookError, call_naming_hooks, failing_hook
from interop.testing.suite import worker_recipe


class Hooked(Adapter):
    name = "hooked"
    modules = ("hooked_framework",)
    contract = (1, 1)

    def to_bytes(self, x: Any) -> bytes:
        return self._read(x)

    def _read(self, x: Any) -> bytes:  # a private helper: the hook is what the kit called
        raise TypeError(f"cannot read {x!r}")

    def from_dlpack(self, source: Any) -> Any:
        try:
            return {}[source]
        except KeyError:
            raise ValueError("no such capsule") from None


def _unreadable(self: Adapter, x: Any) -> bytes:
    raise TypeError("assigned from elsewhere")


class Assigned(Hooked):
    to_bytes = _unreadable  # named by the attribute, not by the function's own name


class NeedsArguments(Hooked):
    def __init__(self, how: str) -> None:
        self.how = how


def _through_the_core(adapter: Adapter) -> None:
    """What the engine does with a framework failing in a step: a typed error, chained."""
    try:
        adapter.from_dlpack("capsule")
    except Exception as exc:
        raise UnsupportedTensorError(f"hooked failed to import the tensor: {exc}") from exc


def test_a_hook_raising_to_the_kit_is_named_with_its_own_error():
    with pytest.raises(HookError) as info:
        call_naming_hooks(Hooked().to_bytes, 3)
    assert str(info.value) == "hooked.to_bytes raised TypeError: cannot read 3"
    assert (info.value.adapter, info.value.hook) == ("hooked", "to_bytes")
    assert isinstance(info.value, AssertionError) and type(info.value.error) is TypeError
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.hook == "to_bytes"


def test_a_hook_assigned_from_a_function_of_another_name_is_named_by_its_attribute():
    with pytest.raises(HookError, match=r"^hooked.to_bytes raised TypeError: assigned from"):
        call_naming_hooks(Assigned().to_bytes, 3)


def test_a_hook_raising_through_the_core_is_named_with_the_cores_error_after_it():
    with pytest.raises(HookError) as info:
        call_naming_hooks(_through_the_core, Hooked())
    first, second = str(info.value).splitlines()
    assert first == "hooked.from_dlpack raised ValueError: no such capsule"
    assert second.strip() == (
        "(the kit saw UnsupportedTensorError: hooked failed to import the tensor: no such capsule)"
    )


def test_the_kits_own_assertions_name_no_hook():
    def case() -> None:
        assert 1 == 2, "values differ"

    with pytest.raises(AssertionError, match="values differ") as info:
        call_naming_hooks(case)
    assert not isinstance(info.value, HookError)
    assert failing_hook(ValueError("not from a hook")) is None


def test_the_worker_makes_an_importable_adapter_class_and_says_why_not_otherwise():
    module, file, qualname = worker_recipe(Hooked())
    assert (module, qualname) == (__name__, "Hooked") and file == __file__

    class Local(Hooked):
        pass

    why = worker_recipe(Local())
    assert isinstance(why, str) and "the kit's worker cannot import hooked's class" in why
    assert why.endswith(
        "test_the_worker_makes_an_importable_adapter_class_and_says_why_not_otherwise.<locals>.Local"
    )
    why = worker_recipe(NeedsArguments("so"))
    assert isinstance(why, str)
    assert why.startswith(f"the kit's worker cannot make {__name__}:NeedsArguments(): TypeError")


RUN_TIME = """
import json, sys, warnings
import interop, interop.testing
from interop.adapter import Adapter
from interop.testing import ConformanceError, ConformanceSuite, suite
from interop.testing.frameworks import SelectionError

sys.path.insert(0, {folder!r})
from quickstart_strict import StrictAdapter


class Missing(StrictAdapter):
    name = "missing"
    modules = ("no_such_framework_here",)


class Named(ConformanceSuite):
    framework = "strict"
    against = ("numpy", "no_such_framework")


def main():
    class Local(StrictAdapter):  # not importable by the worker: runs here
        pass

    out = {{}}
    try:
        interop.testing.check(Missing())
    except ConformanceError as exc:
        out["missing"] = [r.message for r in exc.report.skipped]
    interop.register(Local())
    try:
        Named().parameters()
    except SelectionError as exc:
        out["named"] = str(exc)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        report = interop.testing.check(
            Local(), against=["numpy"], dtypes=["float32"], shapes=[(3, 4)], layouts=["contiguous"]
        )
    out["warned"] = [str(w.message) for w in said if w.category is RuntimeWarning]
    out["local"] = {{
        "passed": len(report.passed),
        "skipped": sorted({{r.message for r in report.skipped}}),
        "worker": suite._RUNNER.worker is not None,
    }}
    print(json.dumps(out))


main()
"""


def test_an_adapter_the_worker_cannot_import_runs_here_and_skips_say_why(tmp_path):
    from test_quickstart import quickstart

    path, body = quickstart()
    (tmp_path / path).write_text(body)
    code = RUN_TIME.format(folder=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["missing"] == [
        "missing is not installed (pip install no_such_framework_here, or the build for your "
        "device)"
    ]
    # a name that is not a framework is refused, naming it (SelectionError)
    assert got["named"].startswith("against: unknown framework 'no_such_framework'; known:")
    local = got["local"]
    assert local["passed"] == 2 * 1 + 6 and not local["worker"], local  # 2 pairs, 6 targets
    why = "the kit's worker cannot import strict's class __main__:main.<locals>.Local"
    assert f"strict is registered at run time and {why}" in local["skipped"], local["skipped"]
    assert got["warned"] == [
        f"the conformance kit runs these cases in this process, not its worker: {why}"
    ]


class Untestable(Adapter):
    """A 2.0 adapter of an installed module that takes no Testing role."""

    name = "untestable"
    modules = ("numpy",)
    contract = (2, 0)


def test_an_adapter_without_the_testing_role_is_skipped_saying_so_and_joins_no_pair():
    from interop.info import CPU
    from interop.roles import Testing
    from interop.testing.suite import unusable, usable_adapters

    why = unusable(Untestable(), CPU)
    assert why is not None and "declares no Testing role" in why and "untestable" in why
    partners = usable_adapters()
    assert partners and all(isinstance(a, Testing) for a in partners)
    assert unusable(next(a for a in partners if a.name == "numpy"), CPU) is None
