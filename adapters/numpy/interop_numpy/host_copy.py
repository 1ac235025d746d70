"""The core's host copier: compact, 64-byte aligned copies of CPU tensors made by NumPy over
their DLPack memory (about 2x most frameworks' own copies), and the checked casts of
`interop.convert(..., dtypes=)`. Reached through `NumpyAdapter.host_copy`, so that the core
names no framework."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from interop.capsule import Held
from interop.errors import CastError
from interop.exchange import Exchange

from . import NATIVE_DTYPES, aligned_empty


def host_copy(source: Exchange, dtype: str | None = None) -> Any:
    """A compact, 64-byte aligned NumPy copy of CPU tensor `source`; `dtype`: in that dtype,
    once every value is known to fit (CastError naming the first that does not)."""
    if dtype is None:
        return _copy(source)
    info = source.info
    source.legacy_read_only_ok = True  # NumPy only reads it
    view = np.from_dlpack(source)
    wanted = np.dtype(dtype)
    misfit = first_misfit(view, wanted)
    if misfit is not None:
        index, value = misfit
        del view  # the source's memory is not held by the error's traceback
        where = f"index {index}" if index else "index () (its only element)"
        raise CastError(
            f"cannot cast this {info.dtype} tensor from {info.framework} to {dtype}: "
            f"{value!r} at {where} does not fit in {dtype}; leave {info.dtype} out of dtypes= "
            "(or cast to a wider dtype), or change the value"
        )
    fresh = aligned_empty(view.size * wanted.itemsize, wanted, view.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's ComplexWarning: the imaginary parts are 0
        np.copyto(fresh, view, casting="unsafe")
    return fresh


def _copy(source: Exchange) -> Any:
    """The copy in the tensor's own dtype; dtypes NumPy lacks (bfloat16, float8) are copied as
    same-width integers (the core tags the copy's capsule with the tensor's dtype)."""
    info = source.info
    raw = info.dtype not in NATIVE_DTYPES
    if raw:
        source.retag(f"uint{8 * info.itemsize}")
    source.legacy_read_only_ok = True  # NumPy only reads it (and 1.x takes legacy ones only)
    view = np.from_dlpack(source)
    fresh = aligned_empty(view.nbytes, view.dtype, view.shape)
    np.copyto(fresh, view)
    return fresh


def copier_of(exporter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`host_copy` as a function of a tensor that `exporter` exports (a CPU capsule, of a
    dtype NumPy holds), for the routes that replay a plan's copy."""

    def copy(x: Any) -> Any:
        view = np.from_dlpack(Held(exporter(x)))
        fresh = aligned_empty(view.nbytes, view.dtype, view.shape)
        fresh[...] = view
        return fresh

    copy.__module__, copy.__qualname__ = "interop_numpy", "NumpyAdapter.host_copy"  # (explain)
    return copy


def first_misfit(view: Any, wanted: Any) -> tuple[tuple[int, ...], Any] | None:
    """(index, value) of the first element of NumPy array `view` that `wanted` cannot hold,
    or None. Integers (and bool) must be in range, and every value must come back unchanged
    from a cast into an integer dtype or from a float into an integer one (NaN does not fit);
    floating narrowing rounds, as narrowing floats means, but must not overflow to infinity."""
    if view.size == 0:
        return None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexWarning: checked below through the round trip
        if view.dtype.kind == "b" and wanted.kind in "biu":
            bad = None  # False and True fit every integer dtype
        elif view.dtype.kind in "iu" and wanted.kind in "biu":
            limits = (0, 1) if wanted.kind == "b" else (np.iinfo(wanted).min, np.iinfo(wanted).max)
            bad = (view < int(limits[0])) | (view > int(limits[1]))
        else:
            cast = view.astype(wanted)
            if view.dtype.kind in "fc" and wanted.kind in "fc":
                bad = np.isfinite(view) & ~np.isfinite(cast)
                if view.dtype.kind == "c" and wanted.kind == "f":
                    bad |= view.imag != 0
            else:
                bad = cast.astype(view.dtype) != view
    if bad is None or not bad.any():
        return None
    index = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), view.shape))
    return index, view[index].item()
