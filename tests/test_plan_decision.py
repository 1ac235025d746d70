"""The decision is a function of its inputs (issue 49, part 5): what the program's state says
(whether NumPy can copy, which framework would copy instead) is an argument of `negotiate`,
read by the caller, so equal arguments give equal plans whatever is imported."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interop.errors import InteropError, UnsupportedLayoutError
from interop.info import Device
from interop.plan import (
    AT_INTERMEDIARY,
    AT_SOURCE,
    CopyAtSource,
    Export,
    Facts,
    Note,
    blockers,
    negotiate,
)
from interop.registry import REGISTRY

pytest.importorskip("torch")
TORCH = REGISTRY.get("torch")
#: a reversed view in a capsule no adapter exports (torch refuses negative strides)
REVERSED = Facts(
    "float32", Device("cpu", 0), "negative", False, "", False, 64, False, True, True, True, "", ""
)


def _plan(numpy_copies: bool, intermediary: str | None):
    caps = TORCH.capabilities()
    export = Export("capsule", "take a DLPack capsule", versioned=True)
    return negotiate(
        "capsule",
        None,
        REVERSED,
        TORCH,
        caps,
        export,
        copy=None,
        device=None,
        numpy_copies=numpy_copies,
        intermediary=intermediary,
    )


def test_who_copies_a_capsule_is_decided_by_the_arguments_alone():
    through_numpy = _plan(numpy_copies=True, intermediary=None)
    (copy,) = [s for s in through_numpy.steps if isinstance(s, CopyAtSource)]
    assert (through_numpy.copy_at, copy.where, copy.numpy) == (AT_SOURCE, "capsule", True)
    other = _plan(numpy_copies=False, intermediary="jax")
    (copy,) = [s for s in other.steps if isinstance(s, CopyAtSource)]
    assert (other.copy_at, copy.where, copy.numpy) == (AT_INTERMEDIARY, "jax", False)
    with pytest.raises(UnsupportedLayoutError, match=r"no imported framework can copy it first"):
        _plan(numpy_copies=False, intermediary=None)
    assert _plan(numpy_copies=True, intermediary=None) == through_numpy  # (equal inputs)


def test_blockers_name_each_reason_and_who_must_copy():
    caps = TORCH.capabilities()
    unaligned = REVERSED._replace(alignment=1, byte_offset=True)
    block = blockers(
        "numpy", None, unaligned, caps, "torch", copy=True, device=None, move=None, policy="share"
    )
    assert block.compact_copy and not block.import_copies
    assert block.reasons[0].startswith("torch imports only") and "negative" in block.reasons[0]
    assert block.reasons[-1] == "copy=True asks for fresh memory"
    shared = blockers(
        "numpy", None, REVERSED._replace(layout="canonical"), caps, "torch",
        copy=None, device=None, move=None, policy="share",
    )  # fmt: skip
    assert shared.reasons == () and not shared.compact_copy


def test_blockers_say_numpy_copies_an_unaligned_buffer_its_importer_would_copy():
    """JAX's importer copies an unaligned host buffer itself; where NumPy can copy it, NumPy's
    aligned copy is made first and shared (faster): one function says so, keyed by the
    alignment a route's key holds."""
    jax = REGISTRY.get("jax")
    if not jax.installed():
        pytest.skip("jax is not installed")
    caps = jax.capabilities()
    assert caps.alignment_on("cpu")[1] == "copy"
    unaligned = REVERSED._replace(layout="canonical", alignment=16)
    kwargs = dict(copy=None, device=None, move=None, policy="share")
    own = blockers("numpy", None, unaligned, caps, "jax", **kwargs, numpy_copies=False)
    assert own.import_copies and not own.compact_copy and not own.numpy_copies
    first = blockers("numpy", None, unaligned, caps, "jax", **kwargs, numpy_copies=True)
    assert first.compact_copy and first.numpy_copies and first.keyed_copy
    assert not first.import_copies and first.reasons == own.reasons
    aligned = blockers(
        "numpy", None, unaligned._replace(alignment=64), caps, "jax", **kwargs, numpy_copies=True
    )
    assert aligned.reasons == () and not aligned.compact_copy and not aligned.import_copies


# --- what a remembered copy stands for ------------------------------------------------------
def _copy_made(plan) -> tuple:
    """Where and how a plan copies, its words left out."""
    steps = [s for s in plan.steps if not isinstance(s, Note)]
    return (plan.copy_at, *((type(s), s.where, getattr(s, "numpy", None)) for s in steps))


def _every_tensor_of_the_key(facts: Facts) -> list[Facts]:
    """`facts` with every value of what route keys leave out (KEYS_OMIT)."""
    flag = facts.read_only and not facts.read_only_why
    kinds = {(facts.read_only, facts.read_only_why), (flag, ""), (True, "remembered")}
    return [
        facts._replace(read_only=r, read_only_why=why, address_taken=taken)
        for r, why in kinds
        for taken in (False, True)
    ]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted({"float32", "bool", "int8", "float16", "bfloat16", "complex64"})),
    st.sampled_from(["canonical", "negative", "strided", "permuted"]),
    st.booleans(),
    st.sampled_from(["", "the core shared it read-only"]),
    st.booleans(),
    st.sampled_from([1, 16, 64]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["numpy", "torch", "jax", "tensorflow", None]),
    st.sampled_from(["numpy", "torch", "jax", "tensorflow", "paddle", "mxnet"]),
    st.sampled_from(["share", "copy"]),
    st.booleans(),
)
def test_a_copy_is_keyed_exactly_where_every_tensor_of_its_key_plans_it(
    dtype, layout, read_only, why, offset, alignment, versioned, taken, source, target, policy,
    numpy_copies,
):  # fmt: skip
    # the oracle is the plan itself, made for each value of what keys leave out and for each
    # policy: `CopyAtSource.keyed` must say whether every one of them copies the same way
    targets = {a.name: a for a in REGISTRY.loaded()}
    if target not in targets or (source is not None and source not in targets):
        pytest.skip("framework not installed")
    adapter, tcaps = targets[target], targets[target].capabilities()
    scaps = None if source is None else targets[source].capabilities()
    facts = Facts(
        dtype, Device("cpu", 0), layout, read_only or bool(why), why, offset, alignment,
        False, versioned, True, True, "", "", taken,
    )  # fmt: skip
    export = Export(source or "capsule", "take a DLPack capsule", versioned=versioned)

    def plan(facts: Facts, policy: str):
        return negotiate(
            source or "capsule", scaps, facts, adapter, tcaps, export, copy=None, device=None,
            policy=policy, numpy_copies=numpy_copies, intermediary="numpy",
        )  # fmt: skip

    try:
        made = plan(facts, policy)
    except InteropError:
        return
    step = next((s for s in made.steps if isinstance(s, CopyAtSource)), None)
    if made.copy_at != AT_SOURCE or step is None:
        return
    alike = []
    for other in _every_tensor_of_the_key(facts):
        for p in ("share", "copy"):
            try:
                alike.append(_copy_made(plan(other, p)) == _copy_made(made))
            except InteropError:
                alike.append(False)
    assert step.keyed == all(alike), (facts, policy, alike)
