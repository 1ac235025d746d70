"""NumPy adapter: any strides, READ_ONLY honoured both ways, ml_dtypes for bfloat16 and float8.

NumPy's own DLPack cannot name bfloat16 or float8. When `ml_dtypes` is installed this adapter
carries them zero-copy by relabelling the capsule's dtype as same-width unsigned integers on the
NumPy side and viewing the result as the ml_dtypes type. Without `ml_dtypes` they are refused
with an error that says to install it.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import sys
from dataclasses import replace
from functools import cache, lru_cache
from typing import Any

from interop import Adapter, Capabilities, UnsupportedDTypeError, UnsupportedTensorError
from interop.adapter import DLPACK, DLPACK_LEGACY, OBJECT, OBJECT_LEGACY, READ_ONLY_FLAG
from interop.capsule import capsule_over
from interop.dlpack import MAX_VERSION
from interop.errors import typed
from interop.exchange import Exchange
from interop.info import TensorInfo, canonical_strides, classify_layout
from interop.roles import (
    AlignedAllocator,
    CapsuleBoxes,
    FastPath,
    HostCopier,
    ImportRefusals,
    StandIns,
    Testing,
    WritableImports,
)
from interop.samples import build_sample, indexed_views

NATIVE_DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 float32 float64 complex64 complex128".split()
)
#: ml_dtypes types carried as raw same-width integers (8 bits and wider only)
ML_DTYPES = frozenset(
    "bfloat16 float8_e3m4 float8_e4m3 float8_e4m3b11fnuz float8_e4m3fn float8_e4m3fnuz "
    "float8_e5m2 float8_e5m2fnuz float8_e8m0fnu".split()
)


# The fast path's exports. Plain functions: on CPython 3.11 a `methodcaller` costs 40-60 ns
# more per call (from Python and from the accelerator's C alike), 130 with a keyword.
def _export_versioned(x: Any, _version: tuple[int, int] = MAX_VERSION) -> Any:
    return x.__dlpack__(max_version=_version)


def _export_legacy(x: Any) -> Any:
    return x.__dlpack__()


class _ArrayFields(ctypes.Structure):
    """The head of PyArrayObject up to its flags: NumPy's public C struct (ndarraytypes.h),
    the same in 1.x and 2.x, which compiled extensions read through PyArray_DATA and
    PyArray_FLAGS. Each field read here is checked against what NumPy says before it is
    trusted (`_data_address`, `_flag_field_works`)."""

    _fields_ = [
        ("head", ctypes.c_byte * object.__basicsize__),
        ("data", ctypes.c_void_p),
        ("nd", ctypes.c_int),
        ("dimensions", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("base", ctypes.c_void_p),
        ("descr", ctypes.c_void_p),
        ("flags", ctypes.c_int),
    ]


#: where PyArrayObject keeps its data pointer: just past the object header
_DATA_OFFSET: int = _ArrayFields.data.offset
_read_pointer = ctypes.c_void_p.from_address


def _pointer_field(x: Any) -> int:
    return _read_pointer(id(x) + _DATA_OFFSET).value or 0


_FLAGS_OFFSET: int = _ArrayFields.flags.offset
_WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE
_flags_field = ctypes.c_int.from_address


def _make_writable(x: Any) -> Any:
    """`x` with its WRITEABLE flag set in place (0.3 us): NumPy's Python API refuses to set it
    on an array over a DLPack capsule, which is no writable buffer, whatever DLPack says."""
    _flags_field(id(x) + _FLAGS_OFFSET).value |= _WRITEABLE
    return x


@cache
def _flag_field_works() -> bool:
    """Whether `_make_writable` may be trusted here: the field at `_FLAGS_OFFSET` reads what
    NumPy states as the flags of several arrays, and setting it on an array from a legacy
    capsule makes NumPy see it, and write through it, as writable. Else legacy imports that
    must be writable are bridged into versioned capsules instead."""
    numpy = sys.modules["numpy"]
    frozen = numpy.zeros(3)
    frozen.flags.writeable = False
    probes = [numpy.empty(7), numpy.arange(40.0)[3:], numpy.ones((4, 5), numpy.int8).T, frozen]
    if any(_flags_field(id(p) + _FLAGS_OFFSET).value != p.flags.num for p in probes):
        return False
    source = numpy.arange(4.0)
    taken = numpy.from_dlpack(_Legacy(source))
    if taken.flags.writeable:  # NumPy before 2.2.5 kept them writable: nothing to make
        return True
    made = _make_writable(taken)
    made[0] = 7.0
    return bool(made.flags.writeable and made.flags.num & _WRITEABLE and source[0] == 7.0)


class _Legacy:
    """An array behind a `__dlpack__` that gives legacy capsules only (for the probe)."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __dlpack__(self, **_: Any) -> Any:
        return self.array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _interface_address(x: Any) -> int:
    return int(x.__array_interface__["data"][0])


@lru_cache(maxsize=1024)
def _layout(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> str | None:
    """The layout class of an array of these byte strides (None: not whole elements)."""
    if any(stride % itemsize for stride in strides):
        return None
    return classify_layout(shape, tuple(stride // itemsize for stride in strides))


@lru_cache(maxsize=256)
def _row_major(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a row-major compact array of `shape` (DLPack's canonical layout,
    extent-1 dimensions included)."""
    return tuple(n * itemsize for n in canonical_strides(shape))


@cache
def _data_address() -> Any:
    """How the fast path reads an array's data address: from the array object's own field
    (0.13 us) when that gives what NumPy states for several arrays, else through the array
    interface (0.9 us; ctypes on the capsule costs 1.1). The first element is at that address:
    NumPy exports with byte_offset 0."""
    numpy = sys.modules["numpy"]
    probes = [numpy.empty(7), numpy.arange(40.0)[3:], numpy.ones((4, 5), numpy.int8)[1:, 2:]]
    if all(_pointer_field(p) == _interface_address(p) != 0 for p in probes):
        return _pointer_field
    return _interface_address


def aligned_empty(nbytes: int, dtype: Any, shape: tuple[int, ...]) -> Any:
    """An uninitialised row-major array whose data is 64-byte aligned (for importers that
    share only such buffers: JAX), in 0.5 us: the address read off the array's own field."""
    numpy = sys.modules["numpy"]
    block = numpy.empty(nbytes + 64, numpy.uint8)
    return numpy.ndarray(shape, dtype, block, -_data_address()(block) % 64)


def _check_subclass(x: Any) -> None:
    """Refuse ndarray subclasses whose meaning DLPack would drop (a masked array's mask)."""
    numpy = sys.modules["numpy"]
    if isinstance(x, numpy.ma.MaskedArray):
        raise UnsupportedTensorError(
            "a NumPy masked array cannot travel through DLPack: its mask would be silently "
            "dropped; convert x.filled(fill_value) or x.data (explicitly unmasked) instead"
        )


def _raw(name: str) -> str:
    return "uint16" if name == "bfloat16" else "uint8"


@cache
def _has_ml_dtypes() -> bool:
    return importlib.util.find_spec("ml_dtypes") is not None


CAPS = Capabilities(
    export_dtypes=NATIVE_DTYPES | ML_DTYPES,
    import_dtypes=NATIVE_DTYPES | ML_DTYPES,
    exports=frozenset({DLPACK}),
    imports=frozenset({OBJECT}),
    import_access=READ_ONLY_FLAG,
    import_errors=(RuntimeError,),  # np.from_dlpack: "Unsupported dtype in DLTensor"
    legacy_import_read_only=True,  # NumPy marks every array from a legacy capsule read-only
    dlpack_version=(1, 0),
    pickled_out_of_band=True,  # (Ray's own path stores NumPy arrays out of band)
)
#: arrays NumPy takes from legacy capsules (read-only) are made writable where the memory may be
#: written, instead of bridged into versioned capsules: 2-3 us less in Python (MXNet's)
CAPS_MARKING = replace(CAPS, writable_legacy_import=True)
#: NumPy before 2.1 neither asks for nor gives versioned capsules
CAPS_LEGACY = replace(CAPS, exports=frozenset({DLPACK_LEGACY}), imports=frozenset({OBJECT_LEGACY}))


#: NPY_USERDEF: dtypes numbered from here on are registered by other packages (ml_dtypes'
#: float8_e5m2 says kind "f" but is not NumPy's, and NumPy's own DLPack cannot name it)
_USER_DTYPES = 256


@cache
def _plain(dtype: Any) -> bool:
    """A native-order boolean, integer, float or complex dtype. `isbuiltin == 1` tells most of
    them in one attribute (`dtype.name` costs ~2 us a call); an unpickled dtype (any array
    from another process: multiprocessing, Ray) is one too, with `isbuiltin == 0`."""
    return dtype.kind in "biufc" and (
        dtype.isbuiltin == 1 or (dtype.isnative and dtype.num < _USER_DTYPES)
    )


def _speaks_versioned() -> bool:
    numpy = sys.modules.get("numpy")
    version = numpy.__version__ if numpy else importlib.metadata.version("numpy")
    return tuple(int(p) for p in version.split(".")[:2]) >= (2, 1)


def _read_only_capsule(x: Any, dtype: str) -> Any:
    """A versioned READ_ONLY capsule over a read-only array, which NumPy before 2.1 refuses to
    export (it has no way to say read-only); the array stays alive until it is released."""
    if any(stride % x.itemsize for stride in x.strides):
        raise typed(UnsupportedTensorError, BufferError)(  # as NumPy's own export says it
            f"numpy cannot export an array whose strides {x.strides} are not whole {dtype} "
            "elements through DLPack; convert a compact copy (np.ascontiguousarray(x)) instead"
        )
    strides = tuple(stride // x.itemsize for stride in x.strides)
    address = x.__array_interface__["data"][0]
    return capsule_over(address, x.shape, strides, dtype, x, read_only=True)


class NumpyAdapter(
    Adapter,
    FastPath,
    HostCopier,
    AlignedAllocator,
    CapsuleBoxes,
    ImportRefusals,
    WritableImports,
    StandIns,
    Testing,
):
    name = "numpy"
    aliases = ("np",)
    modules = ("numpy",)
    distributions = ("numpy",)
    contract = (2, 1)  # (StandIns)

    def tensor_types(self) -> tuple[type, ...]:
        return (sys.modules["numpy"].ndarray,)

    def stand_in_types(self) -> tuple[type, ...]:
        return (sys.modules["numpy"].generic,)

    def stand_in(self, x: Any) -> Any | None:
        """A NumPy scalar of a dtype DLPack carries as a fresh 0-d array (what its
        `__array_interface__` hands out, but through NumPy's own plans and routes, where
        that protocol plans every call); others (str_, datetime64) as they are."""
        numpy = sys.modules["numpy"]
        if not (_plain(x.dtype) or x.dtype.name in ML_DTYPES):
            return None
        return numpy.array(x)

    def capabilities(self) -> Capabilities:
        if not _speaks_versioned():
            return CAPS_LEGACY
        if "numpy" not in sys.modules:  # (never imported here: probed once it is)
            return CAPS
        return CAPS_MARKING if _flag_field_works() else CAPS

    def refusal(self, info: TensorInfo) -> str | None:
        if info.dtype in ML_DTYPES and not _has_ml_dtypes():
            return f"NumPy has no {info.dtype} of its own; install ml_dtypes to receive it"
        return None

    def export(self, x: Any, *, writable: bool = False) -> Any:
        if type(x) is not sys.modules["numpy"].ndarray:
            _check_subclass(x)
        dtype = x.dtype
        if _plain(dtype):
            if x.flags.writeable or _speaks_versioned():
                return x
            return _read_only_capsule(x, dtype.name)  # NumPy < 2.1 cannot export these
        name = x.dtype.name
        if name in ML_DTYPES and not (x.flags.writeable or _speaks_versioned()):
            return _read_only_capsule(x, name)
        # refused as NumPy's own __dlpack__ refuses them: BufferError too
        if name not in ML_DTYPES and not dtype.isnative:
            raise typed(UnsupportedDTypeError, BufferError)(
                f"numpy cannot export a {dtype.str} ({name}) array through DLPack: its byte order "
                "is not the machine's, and DLPack carries native byte order only; convert "
                "x.astype(x.dtype.newbyteorder('=')) first"
            )
        if name not in ML_DTYPES:
            raise typed(UnsupportedDTypeError, BufferError)(
                f"numpy cannot export a {x.dtype} array through DLPack (it carries booleans, "
                "integers, floats, complex numbers and, with ml_dtypes, bfloat16 and float8); "
                "convert x.view('int64') for datetime64/timedelta64, x.astype(...) for others"
            )
        # Export the raw bits, then relabel them with the DLPack code NumPy cannot name.
        exchange = Exchange.from_source(x.view(_raw(name)), versioned=True, framework=self.name)
        exchange.retag(name)
        return exchange.take()

    # --- the fast path ---------------------------------------------------------------------
    def fingerprint(self, x: Any) -> Any:
        """(dtype, writeable) of an array with elements whose strides are exactly row-major
        (NumPy calls an array C-contiguous whatever the strides of its extent-1 dimensions, a
        batch of one: those are compared); with its layout class besides for other strides
        (a transpose, a step slice, a reversed view: `_layout`, remembered per shape and
        strides). Empty arrays, and strides that are not whole elements (which DLPack cannot
        carry), take the full path."""
        flags = x.flags
        shape = x.shape
        if 0 in shape:
            return None
        if flags.c_contiguous and (1 not in shape or x.strides == _row_major(shape, x.itemsize)):
            return (x.dtype, flags.writeable)
        layout = _layout(shape, x.strides, x.itemsize)
        return None if layout is None else (x.dtype, flags.writeable, layout)

    def fast_address(self, x: Any) -> int:
        return _data_address()(x)  # type: ignore[no-any-return]

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Any:
        if dtype in ML_DTYPES:
            return None
        if not _speaks_versioned():  # NumPy < 2.1: legacy capsules of writable arrays only
            return None if versioned else _export_legacy  # (read-only ones fail: full path)
        return _export_versioned if versioned else _export_legacy

    def importer(self, as_object: bool, dtype: str) -> Any:
        if dtype in ML_DTYPES or not as_object:
            return None
        return sys.modules["numpy"].from_dlpack

    def from_dlpack(self, source: Exchange) -> Any:
        import numpy as np

        dtype = source.info.dtype
        if dtype not in ML_DTYPES:
            return np.from_dlpack(source)
        import ml_dtypes

        source.retag(_raw(dtype))
        return np.from_dlpack(source).view(getattr(ml_dtypes, dtype))

    def host_copy(self, source: Exchange, dtype: str | None = None) -> Any:
        """`HostCopier`: the core's host copier, a compact, 64-byte aligned copy of
        CPU tensor `source` made by NumPy over its memory; `dtype`: a checked cast into it."""
        from .host_copy import host_copy

        return host_copy(source, dtype)

    def host_copier_of(self, exporter: Any, dtype: str) -> Any:
        """`host_copy` as a function of a tensor that `exporter` (a source's fast-path hook)
        exports, for routes that replay a plan's copy (`HostCopier`); None for
        dtypes NumPy lacks, which `host_copy` copies as integers."""
        from .host_copy import copier_of

        return copier_of(exporter) if dtype in NATIVE_DTYPES else None

    def set_memory_handler(self, handler: Any | None) -> Any:
        """Make `handler` (a NEP 49 "mem_handler" capsule; None: NumPy's default) NumPy's
        allocator in the current context, for `interop.aligned_numpy`; returns the one it
        replaces (`AlignedAllocator`)."""
        from .allocator import set_handler

        return set_handler(handler)

    def capsule_boxes(self, releases: Any) -> Any:
        """`CapsuleBoxes`: boxes NumPy makes for the core's pure-Python release runtime (with
        `HostCopier`): their releases run in NumPy's C, which keeps a pending exception."""
        from .boxes import capsule_boxes

        return capsule_boxes(releases)

    make_writable = staticmethod(_make_writable)  # (no frame of its own on the fast path)

    def copy(self, x: Any) -> Any:
        """A row-major copy, 64-byte aligned so that importers sharing only aligned buffers
        (JAX) share it instead of copying again. A masked array stays one: its own copy, mask
        kept (convert(x, "numpy", copy=True) would otherwise turn masked values into data)."""
        import numpy as np

        if isinstance(x, np.ma.MaskedArray):
            return x.copy()
        if not _plain(x.dtype):  # object, str, structured, byte-swapped...
            return np.array(x, copy=True, order="C")
        out = aligned_empty(x.nbytes, x.dtype, x.shape)
        out[...] = x
        return out

    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        import numpy as np

        def cast(x: Any, name: str) -> Any:
            import ml_dtypes  # NumPy's bfloat16 and float8 types

            return x.astype(getattr(ml_dtypes, name))

        return build_sample(dtype, shape, lambda v, d: np.array(v, dtype=d).reshape(shape), cast)

    def views(self, x: Any) -> dict[str, Any]:
        return indexed_views(x)

    def to_bytes(self, x: Any) -> bytes:
        return x.tobytes(order="C")

    def data_address(self, x: Any) -> int:
        return int(x.__array_interface__["data"][0])

    def mutate(self, x: Any) -> bool:
        if not x.flags.writeable:
            return False
        x[(0,) * x.ndim] = 1
        return True

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        import numpy as np

        if x.dtype == np.bool_:
            return np.logical_not(x), np.asarray(np.count_nonzero(x))
        return x + x, np.asarray(x.sum())
