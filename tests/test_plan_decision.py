"""The decision is a function of its inputs (issue 49, part 5): what the program's state says
(whether NumPy can copy, which framework would copy instead) is an argument of `negotiate`,
read by the caller, so equal arguments give equal plans whatever is imported."""

from __future__ import annotations

import pytest

from interop.errors import UnsupportedLayoutError
from interop.info import Device
from interop.plan import (
    AT_INTERMEDIARY,
    AT_SOURCE,
    CopyAtSource,
    Export,
    Facts,
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
