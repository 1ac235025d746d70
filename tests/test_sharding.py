"""Sharded arrays: JAX arrays over a mesh <-> torch DTensors, shard by shard, zero-copy.

Three kinds of run, all on CPU:
- this process (one JAX device): detection, the placement table, refusals of plain arrays;
- a child pytest run of this file with 4 host devices (XLA_FLAGS must be set before JAX is
  imported): every spec on a 2x2 mesh, LocalShards, and the rebuilt global array;
- spawned 1-, 2- and 4-process jobs of this file's worker (gloo + jax.distributed on
  127.0.0.1, free ports, timeouts, a barrier before every shutdown): DTensor -> jax.Array ->
  DTensor and back the other way, checked by pointers, values against `full_tensor()`, and
  placements. `INTEROP_SHARDING_LONG=1` adds 64 MB arrays to the jobs.
The frameworks are the oracles: torch's `distribute_tensor` decides which rank holds what,
JAX's `shard.index` and `is_equivalent_to` say where a shard sits, and addresses come from
`data_ptr()` and `unsafe_buffer_pointer()`.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
FOUR = os.environ.get("INTEROP_SHARDING_FOUR_DEVICES") == "1"
LONG = os.environ.get("INTEROP_SHARDING_LONG") == "1"

# Measured on a 2x2 mesh ('x', 'y'): DTensor placements <-> PartitionSpec.
# "S0" is Shard(0), "R" Replicate(); a spec entry is None, an axis or a tuple of axes.
MAPPINGS_2X2: list[tuple[tuple[str, ...], tuple[Any, ...]]] = [
    (("S0", "S1"), ("x", "y")),
    (("S0", "R"), ("x", None)),
    (("R", "S0"), ("y", None)),
    (("S1", "S0"), ("y", "x")),
    (("S0", "S0"), (("x", "y"), None)),
    (("R", "R"), ()),
]
MAPPINGS_1D: list[tuple[tuple[str, ...], tuple[Any, ...]]] = [
    (("S0",), ("x",)),
    (("S1",), (None, "x")),
    (("R",), ()),
]


def placements_text(kinds: tuple[str, ...]) -> str:
    """How torch prints those placements (`str(tuple(dtensor.placements))`)."""
    words = ["Replicate()" if k == "R" else f"Shard(dim={k[1]})" for k in kinds]
    return "(" + ", ".join(words) + ("," if len(words) == 1 else "") + ")"


def case_name(kinds: tuple[str, ...]) -> str:
    return "-".join(kinds)


# --- this process ------------------------------------------------------------------------------
def test_importing_and_plain_conversions_import_no_framework() -> None:
    pytest.importorskip("numpy")
    code = (
        "import sys, numpy as np, interop, interop.sharding as s\n"
        "a = np.arange(6.0)\n"
        "assert interop.convert(a, 'numpy') is a and interop.explain(a, 'numpy').identity\n"
        "assert not s.is_sharded(a)\n"
        "loaded = ('jax', 'torch', 'torch.distributed', 'interop.sharding.model')\n"
        "print(sorted(m for m in loaded if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


FRAMEWORKS = ("torch", "jax", "jaxlib", "tensorflow", "mxnet", "paddle", "cupy", "mlx", "numpy")


def framework_imports(folder: Path) -> list[str]:
    """Every import of a framework in the modules under `folder`, anywhere in them (inside
    functions too), as "file:line module"."""
    import ast

    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.partition(".")[0] in FRAMEWORKS:
                    found.append(f"{path.relative_to(folder)}:{node.lineno} {name}")
    return found


def test_the_core_sharding_package_imports_no_framework() -> None:
    # each framework's side lives in its adapter, behind Adapter.sharded()
    assert framework_imports(ROOT / "interop" / "sharding") == []


def test_the_plugin_page_documents_every_member_of_the_hook() -> None:
    from interop.roles import ShardedArrays

    text = (ROOT / "docs" / "plugins.md").read_text()
    members = {n for n in (*vars(ShardedArrays), *ShardedArrays.__annotations__) if n[0] != "_"}
    assert {"read", "build", "label"} <= members
    missing = sorted(n for n in members if f"`{n}" not in text)
    assert not missing, f"docs/plugins.md does not document {missing}"
    assert "`sharded()`" in text and "the `Sharding` role" in text


def test_a_hook_may_lack_place_and_call_result_text_by_its_first_name() -> None:
    # the kit's member check, as a plugin written before place() and the rename meets it
    from interop_jax.sharding import HOOK

    from interop.sharding.plans import result_text
    from interop.testing.suite import sharded_hook_lacks

    class FirstWritten:
        lacks = ("place", "result_text")

        def __getattr__(self, name: str) -> Any:
            if name in self.lacks:
                raise AttributeError(name)
            return getattr(HOOK, name)

        def describe(self, shards: Any, user_mesh: Any) -> str:
            return "in its own words"

    assert sharded_hook_lacks(HOOK) == [] and sharded_hook_lacks(FirstWritten()) == []
    assert result_text(FirstWritten(), None, None) == "in its own words"  # type: ignore[arg-type]

    class NoBuild(FirstWritten):
        lacks = ("place", "result_text", "build")

    assert sharded_hook_lacks(NoBuild()) == ["build"]


def test_placement_table_maps_both_ways_as_measured() -> None:
    from interop.sharding.model import format_placements, placements_from_spec
    from interop.sharding.model import spec_from_placements as from_placements

    names = ("x", "y")
    for kinds, entries in MAPPINGS_2X2:
        spec = tuple(() if e is None else (e,) if isinstance(e, str) else e for e in entries)
        read = tuple(("shard", int(k[1])) if k != "R" else ("replicate", -1) for k in kinds)
        trimmed = spec
        while trimmed and not trimmed[-1]:
            trimmed = trimmed[:-1]
        assert from_placements(read, names, 2) == trimmed, kinds
        assert placements_from_spec(spec, names) == tuple(
            None if k == "R" else int(k[1]) for k in kinds
        )
        assert format_placements(spec, names) == placements_text(kinds)


def test_a_spec_torch_cannot_order_is_refused_by_name() -> None:
    from interop.sharding import UnsupportedShardingError
    from interop.sharding.model import placements_from_spec

    with pytest.raises(UnsupportedShardingError, match=r"'y' major"):
        placements_from_spec(((("y", "x")),), ("x", "y"))


def test_a_partial_dtensor_refusal_names_the_real_target() -> None:
    from types import SimpleNamespace

    from interop_torch import dtensor as torch_side

    partial = SimpleNamespace(is_partial=lambda: True)
    pending = SimpleNamespace(placements=[partial])  # what refuse_partial reads of a DTensor
    text = str(torch_side.refuse_partial(pending, "numpy"))
    assert "no numpy counterpart" in text and "JAX" not in text
    assert "reduce_partial=True" in text  # what to do
    assert "no jax counterpart" in str(torch_side.refuse_partial(pending, "jax"))
    # and through the adapter's hook, as the core asks it
    from interop_torch import TorchAdapter

    hook = TorchAdapter().sharded()
    assert "no numpy counterpart" in str(hook.refuse_partial(pending, "numpy"))


def test_plain_and_single_device_arrays_take_the_per_tensor_path() -> None:
    jnp = pytest.importorskip("jax.numpy")
    torch = pytest.importorskip("torch")
    import numpy as np

    import interop
    from interop.sharding import convert_sharded, explain_sharded, is_sharded

    for x in (np.ones(4), torch.ones(4), jnp.ones(4)):
        assert not is_sharded(x)
        assert convert_sharded(x, "numpy") is None and explain_sharded(x, "numpy") is None
    y = jnp.arange(8.0)
    t = interop.convert(y, "torch")
    assert type(t) is torch.Tensor and t.data_ptr() == y.unsafe_buffer_pointer()
    assert not isinstance(interop.explain(y, "torch"), interop.ShardedPlan)


def test_local_shards_of_a_plain_array_are_refused() -> None:
    np = pytest.importorskip("numpy")

    from interop.sharding import UnsupportedShardingError, local_shards

    with pytest.raises(UnsupportedShardingError, match="ndarray is not a sharded array"):
        local_shards(np.ones(3))


PLUGIN_WITH_SHARDS = """
import sys, types
import numpy as np
import interop
from interop.sharding.model import LocalShard, LocalShards, MeshLayout

sys.modules["toyfw"] = types.ModuleType("toyfw")  # a framework that only a plugin knows


class Spread:  # toyfw's distributed array: the halves of one array, both in this process
    __module__ = "toyfw"

    def __init__(self, halves):
        self.halves = halves


class Hook:
    label, mesh_name = "toyfw (spread)", "toyfw.Mesh"
    is_array_type = lambda self, kind: issubclass(kind, Spread)
    is_sharded = lambda self, x, mesh_asked: True
    partial = lambda self, x: ""
    mesh_of = lambda self, x: "the toy mesh"
    export_shard = lambda self, data: (data, None)
    processes = lambda self: (0, 1)
    is_mesh = lambda self, device: False

    def read(self, x, partial_as_reduced=False):
        mesh = MeshLayout(("x",), (2,), (0, 0), "cpu")
        shards = tuple(
            LocalShard(h, (slice(2 * i, 2 * i + 2),), interop.Device("cpu", 0), (i,), 0)
            for i, h in enumerate(x.halves)
        )
        return LocalShards("toyfw", (4,), "float64", mesh, (("x",),), shards, source="toyfw")


HOOK = Hook()


class Toy(interop.Adapter):
    name, modules, contract = "toyfw", ("toyfw",), (1, 1)
    tensor_types = lambda self: (Spread,)
    capabilities = lambda self: interop.Capabilities(frozenset(), frozenset())
    sharded = lambda self: HOOK


interop.register(Toy())
halves = [np.arange(2.0), np.arange(2.0, 4.0)]
x = Spread(halves)
out = interop.convert(x, "numpy")
plan = interop.explain(x, "numpy")
print(type(out).__name__, out.framework, out.why)
print([s.data is h for s, h in zip(out, halves)], [s.index for s in out])
print(float((out[1].data * 2).sum()), plan.source, plan.mapping, plan.zero_copy)
print(interop.convert(x, "toyfw") is x, sorted({"jax", "torch"} & set(sys.modules)))
"""


def test_a_plugin_brings_sharding_for_its_own_framework() -> None:
    # the core knows no framework: a plugin's hook alone makes its arrays convert shard by
    # shard (here into NumPy, which has no distributed array: LocalShards sharing each shard)
    pytest.importorskip("numpy")
    out = subprocess.run(
        [sys.executable, "-c", PLUGIN_WITH_SHARDS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "LocalShards numpy numpy has no distributed array"
    assert lines[1] == "[True, True] [(slice(0, 2, None),), (slice(2, 4, None),)]"
    assert lines[2] == "10.0 toyfw (spread) P('x',) -> (Shard(dim=0),) on the cpu mesh " + (
        "('x': 2) over processes [0, 0] True"
    )
    assert lines[3] == "True []"  # into its own framework: itself; no framework imported


PLAN_RUNS = (
    PLUGIN_WITH_SHARDS.split("halves = [")[0]
    + """
from dataclasses import dataclass, replace
from interop.sharding import dispatch
from interop.sharding.plans import ConvertShards, KeepLocal, Rebuild, ReturnSource
from interop.step import Step

halves = [np.arange(2.0), np.arange(2.0, 4.0)]
x = Spread(halves)
real_plan, ran, made = dispatch.plan, [], []


@dataclass(frozen=True)
class Recorded(Step):  # a planned step, logged as convert runs it
    inner: Step = Step("")

    def run(self, conv):
        ran.append(self.inner)
        self.inner.run(conv)


def recording(*args):
    decided = real_plan(*args)
    made.append(decided)
    return replace(decided, steps=tuple(Recorded(s.where, inner=s) for s in decided.steps))


dispatch.plan = recording
out = interop.convert(x, "numpy")
assert type(out).__name__ == "LocalShards" and [s.data is h for s, h in zip(out, halves)] == [1, 1]
assert ran == list(made[0].steps) and len(ran) == 3, ran  # exactly the plan's steps, in order
assert [type(s) for s in ran][1:] == [ConvertShards, KeepLocal], ran
dispatch.plan = real_plan


def deciding(last=None, convert=None):  # the real plan, with one decision changed
    def changed(*args):
        decided = real_plan(*args)
        steps = list(decided.steps)
        if last is not None:
            steps[-1] = last
        if convert is not None:
            steps[1] = replace(steps[1], **convert)
        return replace(decided, steps=tuple(steps))

    return changed


class Builder:  # a target hook's build, as a Rebuild step calls it
    def build(self, shards, arrays, where, copy, user_mesh):
        return ("built", [a is h for a, h in zip(arrays, halves)], where, copy)


dispatch.plan = deciding(last=ReturnSource("numpy"))
assert interop.convert(x, "numpy") is x  # SAME in the plan: the array itself
dispatch.plan = deciding(last=Rebuild("numpy", hook=Builder(), devices=(1, 2), copy=None))
assert interop.convert(x, "numpy") == ("built", [True, True], [1, 2], None)  # BUILD: build()
dispatch.plan = deciding(convert={"copy": True})
fresh = interop.convert(x, "numpy")
assert type(fresh).__name__ == "LocalShards", fresh  # LOCAL, each shard copied as planned
assert [s.data is h or np.shares_memory(s.data, h) for s, h in zip(fresh, halves)] == [0, 0]
dispatch.plan = real_plan

plan = interop.explain(x, "numpy")
assert plan.returns == "local shards" and plan.steps == plan.decision.steps
assert not plan.route.remembered and "each shard's plan says" in str(plan.route)
assert [type(s).__name__ for s in plan.steps] == ["MapPlacements", "ConvertShards", "KeepLocal"]
again = dispatch.run(x, plan)  # an explained plan runs as convert runs it
assert [s.data is h for s, h in zip(again, halves)] == [True, True] and again.why == out.why
assert str(plan.steps[-1]).endswith(out.why) and plan.result.endswith(out.why)
dispatch.plan = recording
assert interop.convert(x, "toyfw") is x and made[-1].returns == "same"  # its own framework
assert [type(s).__name__ for s in ran[3:]] == ["ReturnSource"], ran
print("ok", sorted({"jax", "torch"} & set(sys.modules)))
"""
)


def test_convert_runs_exactly_the_steps_of_the_plan_and_decides_nothing() -> None:
    # the plan alone decides: convert runs its steps in order, and a plan changed by hand
    # (the result's kind, the per-shard copy) changes what convert returns
    pytest.importorskip("numpy")
    out = subprocess.run(
        [sys.executable, "-c", PLAN_RUNS], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok []"


def test_types_met_are_not_kept_alive() -> None:
    # classes can be made by the thousand: remembering whether a type is sharded must not
    # keep it (or its module, or its instances' memory) alive
    import gc
    import weakref

    np = pytest.importorskip("numpy")
    import interop

    class Base(np.ndarray):
        pass

    alive = []
    for i in range(200):
        kind = type(f"Made{i}", (Base,), {})
        x = np.arange(4.0).view(kind)
        plan = interop.explain(x, "numpy")
        assert not isinstance(plan, interop.ShardedPlan) and plan.zero_copy, str(plan)
        alive.append(weakref.ref(kind))
        del kind, x, plan
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 0


def _address(t: Any) -> int:
    """A tensor's data address, as its framework gives it."""
    if hasattr(t, "unsafe_buffer_pointer"):
        return int(t.unsafe_buffer_pointer())  # JAX
    if hasattr(t, "data_ptr"):
        return int(t.data_ptr())  # torch
    return int(t.__array_interface__["data"][0])  # NumPy


def plan_disagrees(plan: Any, x: Any, result: Any, devices: bool = True) -> list[str]:
    """Where `explain(x, ...)`'s plan and `convert(x, ...)`'s `result` disagree (empty: they
    agree): the kind of result, zero-copy, and each shard's global index, process and (with
    `devices`: one process, whose devices all frameworks number alike) device. Read back
    through the frameworks: the shards of both sides as `local_shards` gives them, addresses
    from each framework's own pointer."""
    from types import SimpleNamespace

    import interop
    from interop.sharding import local_shards

    got = "same" if result is x else "build"
    if isinstance(result, interop.LocalShards):
        got = "local shards"
    wrong = [] if plan.returns == got else [f"plan returns {plan.returns!r}, convert {got!r}"]

    def shards(a: Any) -> list[Any]:
        if not hasattr(a, "addressable_shards"):
            return list(local_shards(a))
        # a JAX array, on one device too (a sharded conversion's result over a one-device mesh)
        kind = "cpu" if a.sharding.mesh.devices.flat[0].platform == "cpu" else "cuda"
        return [
            SimpleNamespace(
                data=s.data,
                index=tuple(
                    slice(*i.indices(n)[:2]) for i, n in zip(s.index, a.shape, strict=True)
                ),
                process=s.device.process_index,
                device=interop.Device(kind, s.device.id),
            )
            for s in a.addressable_shards
        ]

    held, made = shards(x), shards(result)
    shared = sorted(_address(s.data) for s in made) == sorted(_address(s.data) for s in held)
    if plan.zero_copy != shared:
        wrong.append(f"plan zero_copy={plan.zero_copy}, but memory shared={shared}")

    def where(shard: Any) -> str:
        spot = f"{[(i.start, i.stop) for i in shard.index]} process {shard.process}"
        return spot + (f" on {shard.device}" if devices else "")

    planned, placed = sorted(map(where, plan.shards)), sorted(map(where, made))
    if planned != placed:
        wrong.append(f"plan places shards at {planned}, convert at {placed}")
    return wrong


# --- a child run with four host devices --------------------------------------------------------
@pytest.mark.skipif(FOUR, reason="this is the parent of the four-device run")
def test_a_shard_that_belongs_to_another_process_is_refused_by_name() -> None:
    # shards [0] and [1] of a 2-device mesh whose device 1 is JAX process 1's: this process
    # (0) holds both, so the second one is not its own to place
    pytest.importorskip("jax")
    from collections import namedtuple
    from types import SimpleNamespace

    from interop_jax.sharded import wanted_devices

    import interop

    class Held(list):  # LocalShards as wanted_devices reads it: its mesh and its shards
        mesh = SimpleNamespace(shape=(2,))

    device = namedtuple("device", "id process_index")  # what it reads of a jax.Device
    mine, theirs = device(0, 0), device(1, 1)
    shards = Held([SimpleNamespace(position=(0,)), SimpleNamespace(position=(1,))])
    with pytest.raises(interop.RemoteShardError, match="JAX process 1.*this is process 0") as e:
        wanted_devices(shards, (mine, theirs))  # type: ignore[arg-type]
    assert isinstance(e.value, interop.DeviceError) and isinstance(e.value, interop.ShardingError)
    assert wanted_devices(Held(shards[:1]), (mine, theirs)) == [mine]  # its own: placed


def test_four_host_devices_in_a_child_run(child4: tuple[int, str]) -> None:
    returncode, log = child4
    lines = log.strip().splitlines()
    summary = lines[-1] if lines else ""
    assert returncode == 0, log[-8000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 20, summary
    assert not re.search(r"\d+ (failed|skipped|errors?)\b", summary), summary


if FOUR:
    import gc
    import weakref
    from dataclasses import replace

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import interop

    SPECS_2X2 = [entries for _, entries in MAPPINGS_2X2]

    def _mesh() -> Mesh:
        return Mesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))

    def _array(entries: tuple[Any, ...], shape: tuple[int, ...] = (8, 8)) -> jax.Array:
        values = jnp.arange(math.prod(shape), dtype=jnp.float32).reshape(shape)
        return jax.device_put(values, NamedSharding(_mesh(), P(*entries)))

    @pytest.mark.parametrize(("kinds", "entries"), MAPPINGS_2X2, ids=[str(e) for e in SPECS_2X2])
    class TestFourDevices:
        def test_each_shard_reaches_torch_zero_copy_with_its_index_and_mesh_device(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            x = _array(entries)
            shards = interop.convert(x, "torch")
            assert isinstance(shards, interop.LocalShards) and shards.framework == "torch"
            assert "torch.distributed is not initialised" in shards.why
            full = np.asarray(x)
            assert len(shards) == len(x.addressable_shards) == 4
            for mine, theirs in zip(shards, x.addressable_shards, strict=True):
                assert type(mine.data) is torch.Tensor
                assert mine.data.data_ptr() == theirs.data.unsafe_buffer_pointer()
                assert theirs.data.__dlpack_device__()[1] == 0  # DLPack says cpu:0 for all...
                assert mine.device == interop.Device("cpu", theirs.device.id)  # ...not we
                assert mine.index == tuple(
                    slice(*s.indices(n)[:2]) for s, n in zip(theirs.index, x.shape, strict=True)
                )
                # a torch kernel on the shard, against JAX's own view of that region
                assert float((mine.data * 2).sum()) == float(2 * full[mine.index].sum())

        def test_placements_are_the_measured_ones(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            shards = interop.convert(_array(entries), "torch")
            assert shards.placements == placements_text(kinds)

        def test_the_shards_rebuild_the_same_global_array_on_the_same_buffers(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            x = _array(entries)
            back = interop.convert(interop.convert(x, "torch"), "jax")
            assert back.sharding == x.sharding
            for a, b in zip(back.addressable_shards, x.addressable_shards, strict=True):
                assert a.device == b.device
                assert a.data.unsafe_buffer_pointer() == b.data.unsafe_buffer_pointer()
            assert float(jax.jit(lambda v: (v * v).sum())(back)) == float((x * x).sum())

        def test_explain_says_per_shard_what_is_shared_and_which_mapping(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            x = _array(entries)
            plan = interop.explain(x, "torch")
            assert isinstance(plan, interop.ShardedPlan) and isinstance(plan, interop.Plan)
            assert plan.zero_copy and len(plan.shards) == 4
            assert f"{P(*entries)} -> " in plan.mapping  # JAX's own spelling of the spec
            assert placements_text(kinds) in plan.mapping
            # shards on host devices 1-3 leave from host device 0 (the core knows one), shared
            assert str(plan).count("first place (jax): hand it over from cpu:0") == 3
            text = str(interop.explain(interop.convert(x, "torch"), "jax"))
            for k in (1, 2, 3):
                assert f"onto cpu:{k} without a copy" in text

        def test_explain_and_convert_agree_on_result_copies_and_shards(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            x = _array(entries)
            shards = interop.convert(x, "torch")
            cases = [(x, to, copy) for to in ("torch", "numpy", "jax") for copy in (None, True)]
            cases += [(shards, to, copy) for to in ("jax", "numpy") for copy in (None, True)]
            for source, to, copy in cases:
                plan = interop.explain(source, to, copy=copy)
                result = interop.convert(source, to, copy=copy)
                wrong = plan_disagrees(plan, source, result)
                assert not wrong, (type(source).__name__, to, copy, wrong, str(plan))
            assert interop.explain(x, "jax").returns == "same"
            assert interop.explain(x, "jax", copy=True).returns == "build"
            assert interop.explain(shards, "jax").returns == "build"
            assert interop.explain(x, "torch").returns == "local shards"

        def test_copy_false_shares_and_copy_true_gives_fresh_memory(
            self, kinds: tuple[str, ...], entries: tuple[Any, ...]
        ) -> None:
            x = _array(entries)
            shared = interop.convert(x, "torch", copy=False)
            fresh = interop.convert(x, "torch", copy=True)
            for s, f, j in zip(shared, fresh, x.addressable_shards, strict=True):
                assert s.data.data_ptr() == j.data.unsafe_buffer_pointer()
                assert f.data.data_ptr() != j.data.unsafe_buffer_pointer()
                assert torch.equal(f.data, s.data)
            again = interop.convert(shared, "jax", copy=False)
            assert [a.data.unsafe_buffer_pointer() for a in again.addressable_shards] == [
                a.data.unsafe_buffer_pointer() for a in x.addressable_shards
            ]

    class TestFourDevicesRefusals:
        def test_a_warm_route_never_takes_a_sharded_array_as_one_tensor(self) -> None:
            # the compiled route checks the capsule, and XLA's export of a sharded array is
            # its first shard's: the route's exporter must refuse the array itself
            import interop_jax

            single = jnp.arange(16, dtype=jnp.float32).reshape(4, 4)
            for _ in range(3):  # routes from jax.Array to torch and numpy, learned
                interop.convert(single, "torch")
                interop.convert(single, "numpy")
            sharded = _array(("x", "y"), shape=(4, 4))  # 2x2 float32 shards, like `single`
            with pytest.raises(BufferError, match="one-device"):
                interop_jax._fast_export()(sharded)
            for target in ("torch", "numpy"):
                out = interop.convert(sharded, target)
                assert isinstance(out, interop.LocalShards) and len(out) == 4, target

        def test_a_torch_world_of_one_rank_cannot_hold_four_devices_shards(self) -> None:
            import torch.distributed as dist

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
            )
            from interop.testing import explain_or_raise

            try:
                x = _array(("x", "y"))
                for call in (interop.convert, explain_or_raise):
                    with pytest.raises(interop.MeshMismatchError, match="one shard per rank"):
                        call(x, "torch")
                from interop.sharding import local_shards

                assert len(local_shards(x, "torch")) == 4  # the explicit per-shard form
            finally:
                dist.barrier()
                dist.destroy_process_group()

        def test_a_hook_as_contract_1_1_was_first_written_still_rebuilds(
            self, monkeypatch: pytest.MonkeyPatch
        ) -> None:
            # a plugin's hook from before place() and the rename of describe(): its build
            # places the shards, and explain asks describe() for the result's words
            import interop_jax
            from interop_jax.sharding import HOOK

            class FirstWritten:
                def __getattr__(self, name: str) -> Any:
                    if name in ("place", "result_text"):
                        raise AttributeError(name)
                    return getattr(HOOK, name)

                def describe(self, shards: Any, user_mesh: Any) -> str:
                    return "as first written: " + HOOK.result_text(shards, user_mesh)

                def build(self, shards: Any, arrays: Any, where: Any, copy: Any, mesh: Any) -> Any:
                    placed = [HOOK.place(a, w, copy) for a, w in zip(arrays, where, strict=True)]
                    return HOOK.build(shards, placed, where, copy, mesh)

            first = FirstWritten()
            monkeypatch.setattr(interop_jax.JaxAdapter, "sharded", lambda self: first)
            x = _array(("x", "y"))
            shards = interop.convert(x, "torch")
            plan = interop.explain(shards, "jax")
            assert plan.result.startswith("as first written: a global jax.Array"), plan.result
            assert "PlaceShards" not in [type(s).__name__ for s in plan.steps]
            back = interop.convert(shards, "jax")
            assert back.sharding == x.sharding and not plan_disagrees(plan, shards, back)
            for a, b in zip(back.addressable_shards, x.addressable_shards, strict=True):
                assert a.data.unsafe_buffer_pointer() == b.data.unsafe_buffer_pointer()
            monkeypatch.undo()  # the hook of today places each shard as a step of its own
            steps = [type(s).__name__ for s in interop.explain(shards, "jax").steps]
            assert steps == ["MapPlacements", "ConvertShards", "PlaceShards", "Rebuild"]

        def test_missing_shards_are_refused_not_filled(self) -> None:
            shards = interop.convert(_array(("x", "y")), "torch")
            partial = replace(shards, shards=shards.shards[:3])
            with pytest.raises(interop.MeshMismatchError, match=r"\[0, 1, 2\].*\[0, 1, 2, 3\]"):
                interop.convert(partial, "jax")

        def test_a_spec_with_no_dtensor_order_still_gives_local_shards(self) -> None:
            x = _array((("y", "x"), None))
            shards = interop.convert(x, "torch")
            assert len(shards) == 4
            assert "no DTensor placements" in interop.explain(x, "torch").mapping
            back = interop.convert(shards, "jax")
            assert back.sharding == x.sharding

        def test_non_compact_torch_shards_are_copied_only_when_asked_and_said(self) -> None:
            shards = interop.convert(_array(("x", "y")), "torch")
            strided = [replace(s, data=s.data.repeat(1, 2)[:, ::2]) for s in shards]
            views = replace(shards, shards=tuple(strided))
            with pytest.raises(interop.CopyForbiddenError):
                interop.convert(views, "jax", copy=False)
            plan = interop.explain(views, "jax")
            assert not plan.zero_copy and all("strided" in str(p.plan) for p in plan.shards)
            back = interop.convert(views, "jax")
            assert not plan_disagrees(plan, views, back)
            for got, view in zip(back.addressable_shards, strided, strict=True):
                assert got.data.unsafe_buffer_pointer() != view.data.data_ptr()
                assert np.array_equal(np.asarray(got.data), view.data.numpy())
                assert got.device.id == view.device.id

        def test_the_rebuilt_array_keeps_the_torch_memory_alive_and_then_frees_it(self) -> None:
            shards = interop.convert(_array(("x", "y")), "torch", copy=True)
            alive = [weakref.ref(s.data) for s in shards]
            back = interop.convert(shards, "jax")
            expected = np.arange(64, dtype=np.float32).reshape(8, 8)
            del shards
            gc.collect()
            junk = [torch.full((16,), -1.0) for _ in range(64)]
            assert np.array_equal(np.asarray(back), expected) and junk
            assert all(ref() is not None for ref in alive)
            del back
            gc.collect()
            assert all(ref() is None for ref in alive)

        def test_a_deleted_sharded_array_is_refused(self) -> None:
            x = _array(("x", "y"))
            x.delete()
            with pytest.raises(interop.UnsupportedTensorError, match="deleted"):
                interop.convert(x, "torch")

        def test_sharded_into_numpy_is_local_shards_sharing_each_shard(self) -> None:
            x = _array(("x", None))
            arrays = interop.convert(x, "numpy")
            assert arrays.framework == "numpy" and "numpy has no distributed array" in arrays.why
            for a, j in zip(arrays, x.addressable_shards, strict=True):
                assert a.data.__array_interface__["data"][0] == j.data.unsafe_buffer_pointer()

        def test_jax_into_jax_is_itself_and_a_copy_keeps_the_sharding(self) -> None:
            x = _array(("x", None))
            assert interop.convert(x, "jax") is x
            fresh = interop.convert(x, "jax", copy=True)
            assert fresh.sharding == x.sharding and bool((fresh == x).all())
            assert fresh.addressable_shards[1].data.unsafe_buffer_pointer() != (
                x.addressable_shards[1].data.unsafe_buffer_pointer()
            )

        def test_a_stream_is_refused_for_shards_on_several_devices(self) -> None:
            with pytest.raises(interop.DeviceError, match="stream"):
                interop.convert(_array(("x", "y")), "torch", stream=1)

        def test_a_plain_device_is_refused_for_a_sharded_array(self) -> None:
            with pytest.raises(interop.DeviceError, match="DeviceMesh"):
                interop.convert(_array(("x", "y")), "torch", device="cpu")


# --- spawned multi-process jobs ----------------------------------------------------------------
def _pythonpath() -> str:
    """This checkout first, then the caller's path (where the adapters under test may be)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Job:
    """Processes started together, logging to files (pipes could fill and block a rank)."""

    def __init__(self, commands: list[list[str]], env: dict[str, str], timeout: float):
        self.tmp = tempfile.TemporaryDirectory()
        self.deadline = time.monotonic() + timeout
        self.procs = []
        for i, command in enumerate(commands):
            with open(Path(self.tmp.name, f"{i}.log"), "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
                    )
                )

    def wait(self) -> list[tuple[int, str]]:
        """Each process's return code and output, killing any still running at the deadline."""
        try:
            for proc in self.procs:
                proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.kill()
        logs = [Path(self.tmp.name, f"{i}.log").read_text() for i in range(len(self.procs))]
        self.tmp.cleanup()
        return [(proc.returncode, log) for proc, log in zip(self.procs, logs, strict=True)]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def start_ranks(world: int, mode: str, device: str = "cpu", timeout: float = 240) -> Job:
    """This file's worker on `world` ranks, on free ports of 127.0.0.1."""
    env = {
        **os.environ,
        "XLA_FLAGS": "",
        "JAX_PLATFORMS": "cpu" if device == "cpu" else "",
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": _pythonpath(),
    }
    ports = [str(_free_port()), str(_free_port())]
    head = [sys.executable, str(HERE), "worker"]
    commands = [[*head, str(r), str(world), *ports, mode, device] for r in range(world)]
    return Job(commands, env, timeout)


def rank_results(job: Job) -> dict[str, Any]:
    """The ranks' results, merged by case and rank."""
    results: dict[str, Any] = {}
    for rank, (returncode, log) in enumerate(job.wait()):
        found = [line for line in log.splitlines() if line.startswith("RESULT ")]
        assert returncode == 0 and found, f"rank {rank} (rc {returncode}):\n{log[-4000:]}"
        for case, facts in json.loads(found[-1][7:]).items():
            results.setdefault(case, {})[rank] = facts
    return results


def start_child4() -> Job:
    env = {
        **os.environ,
        "INTEROP_SHARDING_FOUR_DEVICES": "1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    command = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider"]
    return Job([[*command, "-k", "TestFourDevices"]], env, 240)


#: the jobs the selected tests need are all started at once: most of their time is imports
#: and rendezvous, which overlap
JOBS = {
    "child4": start_child4,
    "job1": lambda: start_ranks(1, "both"),
    "job2": lambda: start_ranks(2, "both"),
    "job2_torch_only": lambda: start_ranks(2, "torch-only"),
    "job4": lambda: start_ranks(4, "both"),
}


@pytest.fixture(scope="module")
def jobs(request: pytest.FixtureRequest) -> Any:
    pytest.importorskip("jax")
    pytest.importorskip("torch.distributed")
    wanted = {n for item in request.session.items for n in item.fixturenames if n in JOBS}
    started = {name: JOBS[name]() for name in sorted(wanted)}
    yield started
    for job in started.values():
        job.kill()


@pytest.fixture(scope="module")
def child4(jobs: dict[str, Job]) -> tuple[int, str]:
    return jobs["child4"].wait()[0]


def _facts(job: dict[str, Any], case: str) -> list[dict[str, Any]]:
    assert case in job, f"the job ran no case {case!r}: {sorted(job)}"
    ranks = job[case]
    for facts in ranks.values():
        assert "error" not in facts, facts["error"]
    return list(ranks.values())


@pytest.fixture(scope="module")
def job1(jobs: dict[str, Job]) -> dict[str, Any]:
    return rank_results(jobs["job1"])


@pytest.fixture(scope="module")
def job2(jobs: dict[str, Job]) -> dict[str, Any]:
    return rank_results(jobs["job2"])


@pytest.fixture(scope="module")
def job2_torch_only(jobs: dict[str, Job]) -> dict[str, Any]:
    return rank_results(jobs["job2_torch_only"])


@pytest.fixture(scope="module")
def job4(jobs: dict[str, Job]) -> dict[str, Any]:
    return rank_results(jobs["job4"])


def _check_dtensor_to_jax(facts: list[dict[str, Any]], kinds: tuple[str, ...]) -> None:
    for f in facts:
        assert f["type"] == "ArrayImpl" and f["spec_matches"], f
        assert f["pointer"] and f["values"] and f["explain_zero_copy"], f
        assert f["jax_sum"] == f["full_sum"], f
        assert f["back_type"] == "DTensor", f
        assert f["back_placements"] == placements_text(kinds), f
        assert f["back_pointer"] and f["back_full"] and f["back_mesh"], f
        assert f["agree"] == f["back_agree"] == [], f  # explain says what convert did


def _check_jax_to_dtensor(facts: list[dict[str, Any]], kinds: tuple[str, ...]) -> None:
    for f in facts:
        assert f["type"] == "DTensor" and f["placements"] == placements_text(kinds), f
        assert f["pointer"] and f["full"] and f["mesh"], f
        assert f["back_equivalent"] and f["back_pointer"] and f["jax_sum"] == f["full_sum"], f
        assert f["agree"] == f["back_agree"] == [], f  # explain says what convert did


def test_one_rank_dtensor_to_jax_and_back(job1: dict[str, Any]) -> None:
    for kinds, _ in MAPPINGS_1D:
        facts = _facts(job1, "torch:" + case_name(kinds))
        _check_dtensor_to_jax(facts, kinds)
        # without the mesh, an array on one device is a plain tensor, on the same memory
        assert all(f["plain_type"] == "Tensor" and f["plain_pointer"] for f in facts)


@pytest.mark.parametrize(("kinds", "entries"), MAPPINGS_1D, ids=[str(k) for k, _ in MAPPINGS_1D])
def test_two_ranks_dtensor_to_jax_and_back(
    job2: dict[str, Any], kinds: tuple[str, ...], entries: tuple[Any, ...]
) -> None:
    _check_dtensor_to_jax(_facts(job2, "torch:" + case_name(kinds)), kinds)


@pytest.mark.parametrize(("kinds", "entries"), MAPPINGS_1D, ids=[str(k) for k, _ in MAPPINGS_1D])
def test_two_ranks_jax_to_dtensor_and_back(
    job2: dict[str, Any], kinds: tuple[str, ...], entries: tuple[Any, ...]
) -> None:
    _check_jax_to_dtensor(_facts(job2, "jax:" + case_name(kinds)), kinds)


@pytest.mark.parametrize(("kinds", "entries"), MAPPINGS_2X2, ids=[str(k) for k, _ in MAPPINGS_2X2])
def test_four_ranks_dtensor_to_jax_and_back(
    job4: dict[str, Any], kinds: tuple[str, ...], entries: tuple[Any, ...]
) -> None:
    _check_dtensor_to_jax(_facts(job4, "torch:" + case_name(kinds)), kinds)


@pytest.mark.parametrize(("kinds", "entries"), MAPPINGS_2X2, ids=[str(k) for k, _ in MAPPINGS_2X2])
def test_four_ranks_jax_to_dtensor_and_back(
    job4: dict[str, Any], kinds: tuple[str, ...], entries: tuple[Any, ...]
) -> None:
    _check_jax_to_dtensor(_facts(job4, "jax:" + case_name(kinds)), kinds)


def test_two_ranks_refusals_are_typed_and_copy_false_never_copies(job2: dict[str, Any]) -> None:
    for f in _facts(job2, "refusals"):
        assert f["partial"] == ["PartialPlacementError", "PartialPlacementError"], f
        assert f["uneven"] == ["UnevenShardsError", "UnevenShardsError"], f
        assert f["reduced_sum"] == f["partial_sum"] == 48.0 and f["reduced_spec"] == "P()", f
        assert f["reduce_copy_false"] == "CopyForbiddenError", f
        assert f["copy_false_pointer"], f
        assert f["strided_copy_false"] == "CopyForbiddenError", f
        assert f["strided_copied"] and f["strided_values"] and "strided" in f["strided_why"], f
        assert f["unaligned_copy_false"] == "CopyForbiddenError", f
        assert f["unaligned_copied"] and "aligned" in f["unaligned_why"], f
        assert f["copy_true_fresh"] and f["copy_true_values"], f
        assert f["numpy_shards"] == 1 and f["numpy_pointer"] and f["numpy_index_values"], f
        assert f["mesh_mismatch"] == "MeshMismatchError", f
        assert f["own_mesh"] and f["own_mesh_spec"] == "P('data',)" and f["own_mesh_pointer"], f
        assert f["reduce_plan"][0] is False and "all-reduced first" in f["reduce_plan"][1], f
        assert f["reduce_plan"][2] == "build", f  # what convert_sharded returned: a jax.Array
        assert all(v == [] for v in f["agree"].values()) and len(f["agree"]) == 6, f


def test_two_ranks_without_jax_distributed_give_local_shards_that_rebuild_the_dtensor(
    job2_torch_only: dict[str, Any],
) -> None:
    for f in _facts(job2_torch_only, "local"):
        assert f["type"] == "LocalShards" and f["framework"] == "jax", f
        assert "jax.distributed is not initialised" in f["why"], f
        assert f["count"] == 1 and f["pointer"] and f["values"], f
        assert f["back_type"] == "DTensor" and f["back_placements"] == "(Shard(dim=0),)", f
        assert f["back_pointer"] and f["back_full"], f
        assert f["agree"] == f["back_agree"] == [], f  # explain says what convert did


@pytest.mark.skipif(not LONG, reason="64 MB arrays over 2 and 4 ranks: INTEROP_SHARDING_LONG=1")
@pytest.mark.parametrize("world", [2, 4])
def test_long_64_mb_shards_round_trip_zero_copy(world: int) -> None:
    facts = _facts(rank_results(start_ranks(world, "long", timeout=600)), "long")
    for f in facts:
        assert f["pointer"] and f["back_pointer"] and f["back_full"], f


def test_the_documented_two_process_example_prints_what_the_docs_say(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    text = (ROOT / "docs" / "sharding.md").read_text()
    demo = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "initialize" in b)
    readme = (ROOT / "README.md").read_text()
    assert f"```python\n{demo}```" in readme, "README's two-process example differs from the docs'"
    # as written, but on free ports (CI may run other jobs beside it)
    for port in ("12355", "12356"):
        assert f"127.0.0.1:{port}" in demo
        demo = demo.replace(f"127.0.0.1:{port}", f"127.0.0.1:{_free_port()}")
    script = tmp_path / "sharded_demo.py"
    script.write_text(demo)
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "XLA_FLAGS": ""}
    job = Job([[sys.executable, str(script), str(r)] for r in (0, 1)], env, 300)
    logs = job.wait()
    for rank, (returncode, log) in enumerate(logs):
        assert returncode == 0, log[-4000:]
        assert f"rank {rank}: P('x',), shard shared: True, sum of squares 1240.0" in log
        assert f"rank {rank}: (Shard(dim=0),), first column [0.0, 8.0, 16.0, 24.0]" in log
    documented = re.search(r"```\n(torch \(DTensor\).*?)```", text, re.S)
    assert documented is not None
    printed = re.sub(r"data 0x[0-9a-f]+\+0", "data 0x…", logs[0][1])  # addresses vary
    # the shard takes the route the earlier conversion taught: the docs show the compiled
    # one, the pure twin says "(pure Python)"
    route = re.compile(r"\((?:compiled|pure Python)\)[^\n]*?, replaying")
    printed = route.sub("(...), replaying", printed)
    expected = route.sub("(...), replaying", documented.group(1).strip())
    assert expected in printed, printed


@pytest.mark.cuda
def test_two_cuda_ranks_over_nccl_round_trip_zero_copy() -> None:
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if seen < 2:
        pytest.skip(f"needs 2 CUDA devices for 2 NCCL ranks; torch sees {seen} here")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("this jaxlib has no CUDA backend (jax[cuda12] provides one)")
    job = rank_results(start_ranks(2, "both", device="cuda"))
    for kinds, _ in MAPPINGS_1D:
        _check_dtensor_to_jax(_facts(job, "torch:" + case_name(kinds)), kinds)
        _check_jax_to_dtensor(_facts(job, "jax:" + case_name(kinds)), kinds)


# --- the worker: one rank of a job ---------------------------------------------------------------
def _error(exc: BaseException) -> str:
    return type(exc).__name__


def worker(rank: int, world: int, torch_port: int, jax_port: int, mode: str, device: str) -> None:
    """One rank: initialise torch (gloo or NCCL) and, unless `mode` is torch-only,
    jax.distributed; run the cases; reach a barrier; shut both down."""
    import datetime

    import jax
    import numpy as np
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(rank)
    if mode != "torch-only":
        local_ids = [rank] if device == "cuda" else None
        jax.distributed.initialize(
            f"127.0.0.1:{jax_port}",
            world,
            rank,
            local_device_ids=local_ids,
            initialization_timeout=90,
        )
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{torch_port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=90),
    )
    results: dict[str, Any] = {}
    try:
        cases = _Cases(rank, world, device, np, torch, jax)
        if mode == "torch-only":
            results["local"] = cases.guard(cases.local_without_jax_distributed)
        elif mode == "long":
            results["long"] = cases.guard(cases.long)
        else:
            table = MAPPINGS_2X2 if world == 4 else MAPPINGS_1D
            for kinds, entries in table:
                name = case_name(kinds)
                results["torch:" + name] = cases.guard(cases.dtensor_first, kinds, entries)
                if world > 1:
                    results["jax:" + name] = cases.guard(cases.jax_first, kinds, entries)
            if world == 2:
                results["refusals"] = cases.guard(cases.refusals)
        dist.barrier()
    finally:
        print("RESULT " + json.dumps(results), flush=True)
        dist.destroy_process_group()
        if mode != "torch-only":
            jax.distributed.shutdown()


class _Cases:
    """The checks each rank makes; every fact is read back through the frameworks."""

    def __init__(self, rank: int, world: int, device: str, np: Any, torch: Any, jax: Any):
        from torch.distributed.device_mesh import init_device_mesh

        self.rank, self.world, self.device = rank, world, device
        self.np, self.torch, self.jax = np, torch, jax
        shape, names = ((2, 2), ("x", "y")) if world == 4 else ((world,), ("x",))
        self.mesh = init_device_mesh(device, shape, mesh_dim_names=names)
        self.names = names

    def guard(self, case: Any, *args: Any) -> dict[str, Any]:
        try:
            return dict(case(*args))
        except Exception as exc:  # reported to the parent, which fails the case by name
            import traceback

            return {"error": f"{_error(exc)}: {exc}\n{traceback.format_exc()[-3000:]}"}

    def placements(self, kinds: tuple[str, ...]) -> list[Any]:
        from torch.distributed.tensor import Replicate, Shard

        return [Replicate() if k == "R" else Shard(int(k[1])) for k in kinds]

    def full(self, shape: tuple[int, ...] = (8, 8)) -> Any:
        n = math.prod(shape)
        return self.torch.arange(n, dtype=self.torch.float32, device=self.device).reshape(shape)

    def jax_mesh(self) -> Any:
        devices = sorted(self.jax.devices(), key=lambda d: d.process_index)
        shape = tuple(self.mesh.shape)
        return self.jax.sharding.Mesh(self.np.array(devices).reshape(shape), self.names)

    def dtensor_first(self, kinds: tuple[str, ...], entries: tuple[Any, ...]) -> dict[str, Any]:
        from torch.distributed.tensor import distribute_tensor

        import interop

        jax, np, torch = self.jax, self.np, self.torch
        full = self.full()
        dt = distribute_tensor(full, self.mesh, self.placements(kinds))  # torch decides
        local = dt.to_local()
        reference = dt.full_tensor()
        j = interop.convert(dt, "jax")
        shard = j.addressable_shards[0]
        expected = jax.sharding.NamedSharding(j.sharding.mesh, jax.sharding.PartitionSpec(*entries))
        facts = {
            "type": type(j).__name__,
            "spec_matches": j.sharding.is_equivalent_to(expected, 2)
            and j.sharding.mesh.devices.tolist() == self.jax_mesh().devices.tolist(),
            "pointer": shard.data.unsafe_buffer_pointer() == local.data_ptr(),
            "values": bool(
                np.array_equal(np.asarray(shard.data), reference[shard.index].cpu().numpy())
            ),
            "jax_sum": float(jax.jit(lambda v: v.sum())(j)),
            "full_sum": float(reference.sum()),
            "explain_zero_copy": interop.explain(dt, "jax").zero_copy,
            "agree": plan_disagrees(interop.explain(dt, "jax"), dt, j, devices=False),
        }
        mesh = self.mesh if self.world == 1 else None
        back = interop.convert(j, "torch", device=mesh)
        facts["back_agree"] = plan_disagrees(
            interop.explain(j, "torch", device=mesh), j, back, devices=False
        )
        facts.update(
            back_type=type(back).__name__,
            back_placements=str(tuple(back.placements)),
            back_pointer=back.to_local().data_ptr() == local.data_ptr(),
            back_full=bool(torch.equal(back.full_tensor(), reference)),
            back_mesh=back.device_mesh.mesh.tolist() == self.mesh.mesh.tolist(),
        )
        if self.world == 1:
            plain = interop.convert(j, "torch")
            facts.update(
                plain_type=type(plain).__name__, plain_pointer=plain.data_ptr() == local.data_ptr()
            )
        return facts

    def jax_first(self, kinds: tuple[str, ...], entries: tuple[Any, ...]) -> dict[str, Any]:
        import interop

        jax, np, torch = self.jax, self.np, self.torch
        full = np.arange(64, dtype=np.float32).reshape(8, 8)
        sharding = jax.sharding.NamedSharding(self.jax_mesh(), jax.sharding.PartitionSpec(*entries))
        j = jax.make_array_from_callback(full.shape, sharding, lambda index: full[index])
        d = interop.convert(j, "torch")
        mine = j.addressable_shards[0].data.unsafe_buffer_pointer()
        facts = {
            "type": type(d).__name__,
            "placements": str(tuple(d.placements)),
            "pointer": d.to_local().data_ptr() == mine,
            "full": bool(torch.equal(d.full_tensor().cpu(), torch.from_numpy(full))),
            "mesh": d.device_mesh.mesh.tolist() == self.mesh.mesh.tolist(),
            "agree": plan_disagrees(interop.explain(j, "torch"), j, d, devices=False),
        }
        back = interop.convert(d, "jax")
        facts["back_agree"] = plan_disagrees(interop.explain(d, "jax"), d, back, devices=False)
        facts.update(
            back_equivalent=back.sharding.is_equivalent_to(j.sharding, 2),
            back_pointer=back.addressable_shards[0].data.unsafe_buffer_pointer() == mine,
            jax_sum=float(jax.jit(lambda v: v.sum())(back)),
            full_sum=float(full.sum()),
        )
        return facts

    def refusals(self) -> dict[str, Any]:
        from torch.distributed.tensor import DTensor, Partial, Shard, distribute_tensor

        import interop
        from interop.sharding import convert_sharded
        from interop.testing import explain_or_raise

        torch, np = self.torch, self.np
        facts: dict[str, Any] = {}

        def refused(call: Any, *args: Any, **kw: Any) -> str:
            try:
                call(*args, **kw)
            except Exception as exc:
                return _error(exc)
            return "accepted"

        pending = DTensor.from_local(torch.full((4, 4), 1.0 + self.rank), self.mesh, [Partial()])
        facts["partial"] = [refused(c, pending, "jax") for c in (interop.convert, explain_or_raise)]
        reduced = convert_sharded(pending, "jax", reduce_partial=True)
        facts["partial_sum"] = float(pending.full_tensor().sum())  # torch's own reduction
        facts["reduced_sum"] = float(self.jax.jit(lambda v: v.sum())(reduced))
        facts["reduced_spec"] = str(reduced.sharding.spec).replace("PartitionSpec", "P")
        facts["reduce_copy_false"] = refused(
            convert_sharded, pending, "jax", reduce_partial=True, copy=False
        )
        uneven = distribute_tensor(self.full((5, 3)), self.mesh, [Shard(0)])
        facts["uneven"] = [refused(c, uneven, "jax") for c in (interop.convert, explain_or_raise)]

        dt = distribute_tensor(self.full(), self.mesh, [Shard(0)])
        shared = interop.convert(dt, "jax", copy=False)
        ptr = shared.addressable_shards[0].data.unsafe_buffer_pointer()
        facts["copy_false_pointer"] = ptr == dt.to_local().data_ptr()
        fresh = interop.convert(dt, "jax", copy=True)
        got = fresh.addressable_shards[0].data
        facts["copy_true_fresh"] = got.unsafe_buffer_pointer() != dt.to_local().data_ptr()
        facts["copy_true_values"] = bool(np.array_equal(np.asarray(got), dt.to_local().numpy()))

        wide = torch.arange(64.0).reshape(4, 16)[:, ::2]  # a step slice: JAX cannot share it
        strided = DTensor.from_local(wide, self.mesh, [Shard(0)], run_check=False)
        facts["strided_copy_false"] = refused(interop.convert, strided, "jax", copy=False)
        copied = interop.convert(strided, "jax")
        piece = copied.addressable_shards[0].data
        facts["strided_copied"] = piece.unsafe_buffer_pointer() != wide.data_ptr()
        facts["strided_values"] = bool(np.array_equal(np.asarray(piece), wide.numpy()))
        facts["strided_why"] = " ".join(interop.explain(strided, "jax").reasons)
        agree = {"strided": plan_disagrees(interop.explain(strided, "jax"), strided, copied, False)}

        raw = torch.arange(17.0)
        odd = raw[1:].reshape(4, 4)  # 4 bytes past an aligned start
        unaligned = DTensor.from_local(odd, self.mesh, [Shard(0)], run_check=False)
        facts["unaligned_copy_false"] = refused(interop.convert, unaligned, "jax", copy=False)
        moved = interop.convert(unaligned, "jax").addressable_shards[0].data
        facts["unaligned_copied"] = moved.unsafe_buffer_pointer() != odd.data_ptr()
        facts["unaligned_why"] = " ".join(interop.explain(unaligned, "jax").reasons)
        moved_all = interop.convert(unaligned, "jax")
        explained = interop.explain(unaligned, "jax")
        agree["unaligned"] = plan_disagrees(explained, unaligned, moved_all, False)

        arrays = interop.convert(dt, "numpy")
        agree["numpy"] = plan_disagrees(interop.explain(dt, "numpy"), dt, arrays, False)
        agree["copy_false"] = plan_disagrees(
            interop.explain(dt, "jax", copy=False), dt, shared, False
        )
        agree["copy_true"] = plan_disagrees(interop.explain(dt, "jax", copy=True), dt, fresh, False)
        mine = arrays[0]
        facts["numpy_shards"] = len(arrays)
        facts["numpy_pointer"] = (
            mine.data.__array_interface__["data"][0] == dt.to_local().data_ptr()
        )
        facts["numpy_index_values"] = bool(
            np.array_equal(mine.data, dt.full_tensor().numpy()[mine.index])
        )
        jmesh = self.jax.sharding.Mesh(self.np.array(self.jax.devices()[::-1]), ("x",))
        facts["mesh_mismatch"] = refused(interop.convert, dt, "jax", device=jmesh)
        mine = self.jax.sharding.Mesh(self.jax_mesh().devices, ("data",))  # my names
        onto = interop.convert(dt, "jax", device=mine)
        facts["own_mesh"] = onto.sharding.mesh is mine or onto.sharding.mesh == mine
        facts["own_mesh_spec"] = str(onto.sharding.spec)
        ptr = onto.addressable_shards[0].data.unsafe_buffer_pointer()
        facts["own_mesh_pointer"] = ptr == dt.to_local().data_ptr()
        explained = interop.explain(dt, "jax", device=mine)
        agree["own_mesh"] = plan_disagrees(explained, dt, onto, False)
        facts["agree"] = agree
        plan = interop.sharding.explain_sharded(pending, "jax", reduce_partial=True)
        facts["reduce_plan"] = [plan.zero_copy, " ".join(plan.reasons), plan.returns]
        return facts

    def local_without_jax_distributed(self) -> dict[str, Any]:
        from torch.distributed.tensor import Shard, distribute_tensor

        import interop

        np, torch = self.np, self.torch
        dt = distribute_tensor(self.full(), self.mesh, [Shard(0)])
        reference = dt.full_tensor()
        shards = interop.convert(dt, "jax")
        facts: dict[str, Any] = {"type": type(shards).__name__}
        if isinstance(shards, interop.LocalShards):
            mine = shards[0]
            facts.update(
                framework=shards.framework,
                why=shards.why,
                count=len(shards),
                pointer=mine.data.unsafe_buffer_pointer() == dt.to_local().data_ptr(),
                values=bool(np.array_equal(np.asarray(mine.data), reference[mine.index].numpy())),
                agree=plan_disagrees(interop.explain(dt, "jax"), dt, shards, devices=False),
            )
            back = interop.convert(shards, "torch")
            facts["back_agree"] = plan_disagrees(interop.explain(shards, "torch"), shards, back)
            facts.update(
                back_type=type(back).__name__,
                back_placements=str(tuple(back.placements)),
                back_pointer=back.to_local().data_ptr() == dt.to_local().data_ptr(),
                back_full=bool(torch.equal(back.full_tensor(), reference)),
            )
        return facts

    def long(self) -> dict[str, Any]:
        from torch.distributed.tensor import Shard, distribute_tensor

        import interop

        full = self.full((4096, 4096))  # 64 MB of float32
        dt = distribute_tensor(full, self.mesh, [Shard(0)] * self.mesh.ndim)
        j = interop.convert(dt, "jax", copy=False)
        back = interop.convert(j, "torch", copy=False)
        return {
            "pointer": j.addressable_shards[0].data.unsafe_buffer_pointer()
            == dt.to_local().data_ptr(),
            "back_pointer": back.to_local().data_ptr() == dt.to_local().data_ptr(),
            "back_full": bool(self.torch.equal(back.full_tensor(), full)),
        }


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    rank_, world_, tport_, jport_, mode_, device_ = sys.argv[2:8]
    worker(int(rank_), int(world_), int(tport_), int(jport_), mode_, device_)
    sys.stdout.flush()
    os._exit(0)
