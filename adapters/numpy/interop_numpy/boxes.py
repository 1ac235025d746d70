"""NumPy's boxes for the core's pure-Python release runtime (`Adapter.capsule_boxes`).

Without the compiled accelerator a box the core makes releases through a ctypes callback,
and a ctypes callback fails when a consumer frees the tensor while an exception is being
raised: CPython replaces that exception with a SystemError and the release is lost
(`[convert(x, "numpy"), 1 / 0]` from MXNet did). So NumPy, where it is imported, boxes what
it can take: it imports the capsule and exports the array again (in the other kind, for a
bridge); the release then runs in NumPy's C, which keeps a pending exception, and costs no
Python: 2.8 against 4.5 us for a legacy -> versioned bridge. CPU tensors of NumPy's own
dtypes only; NumPy 2.3 and later, which export versioned capsules (from 2.1) and make
imports writable exactly where DLPack says they are (numpy#28599, fixed in 2.2.5).
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy

from interop import capsule as cap
from interop import dlpack as dl
from interop.errors import DLPackError

#: the DLPack dtypes NumPy holds, as (code, bits, lanes) bytes
_DTYPES = frozenset(
    struct.pack("=BBH", code, bits, 1)
    for code, widths in (
        (0, (8, 16, 32, 64)),
        (1, (8, 16, 32, 64)),
        (2, (16, 32, 64)),
        (5, (64, 128)),
    )
    for bits in widths
) | {struct.pack("=BBH", 6, 8, 1)}
_CPU = struct.pack("=i", 1)
_WORD = struct.Struct("=Q")
_FLAGS_AT = 24  # the flags' offset in DLManagedTensorVersioned
_DEFERRAL_HEAD = {True: 56, False: 24}  # bytes read: (the flags and) data, device, dtype
#: `size` bytes at an address, as bytes (ctypes.string_at's own call, without its frame)
_read = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)(
    ("PyBytes_FromStringAndSize", ctypes.pythonapi)
)
#: memmove through a prototype that keeps the GIL (ctypes.memmove's releases it: 0.1 us more)
_poke = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)(
    ctypes.cast(ctypes.memmove, ctypes.c_void_p).value or 0
)


class NumpyBoxes:
    """Boxes NumPy makes for the core's pure runtime (`interop.releases.Boxes`)."""

    def __init__(self, releases: Any) -> None:
        self._releases = releases

    def bridge(self, capsule: object, inner: int, inner_versioned: bool, flags: int) -> Any:
        """`capsule`'s tensor in a capsule of the other kind made by NumPy (with `flags`, and
        NumPy's version, 1.0, if versioned), the old one used; None, the capsule as it was,
        where NumPy cannot take it."""
        return self._box(capsule, inner, inner_versioned, not inner_versioned, flags)

    def again(self, capsule: object, inner: int, versioned: bool, flags: int) -> Any:
        """`capsule`'s tensor in a capsule of the same kind made by NumPy, whose release takes
        the GIL first (`interop.capsule.gil_first`); None where NumPy cannot take it. NumPy
        imports a legacy capsule read-only and exports no read-only array as legacy: a
        legacy one goes through a writable versioned box."""
        if versioned:
            return self._box(capsule, inner, True, True, flags)
        boxed = self._box(capsule, inner, False, True, 0)
        if boxed is None:
            return None
        return self._box(boxed, cap.pointer(boxed, True)[0], True, False, 0)

    def _box(
        self, capsule: object, inner: int, inner_versioned: bool, to_versioned: bool, flags: int
    ) -> Any:
        head = _read(inner + dl.TENSOR_AT[inner_versioned] + 8, 16)  # device, ndim, dtype
        if head[:4] != _CPU or head[12:] not in _DTYPES:
            return None
        cleared = inner_versioned and not to_versioned and flags & dl.FLAG_READ_ONLY
        if cleared:  # NumPy exports no read-only array as legacy; the consumer cannot write
            _poke(inner + _FLAGS_AT, _WORD.pack(flags & ~dl.FLAG_READ_ONLY), 8)
        try:
            array = numpy.from_dlpack(cap.Held(capsule))
        except Exception:  # (NumPy leaves a capsule it refuses as it was)
            if cleared:
                _poke(inner + _FLAGS_AT, _WORD.pack(flags), 8)
            return None
        try:
            out = array.__dlpack__(max_version=dl.MAX_VERSION if to_versioned else None)
        except Exception as exc:  # not met; the array releases the tensor once as it goes
            raise DLPackError(
                f"NumPy imported the tensor but cannot export it again: {exc}"
            ) from exc
        made = 0 if array.flags.writeable else dl.FLAG_READ_ONLY  # what NumPy's export says
        if to_versioned and flags != made:
            _poke(cap.pointer(out, True)[0] + _FLAGS_AT, _WORD.pack(flags), 8)
        return out

    def defer(self, capsule: object, inner: int, versioned: bool, claim: bool) -> Any:
        """The deferring re-wrap made by NumPy: a versioned capsule over `capsule`'s tensor
        (used from then on) whose release, whenever the consumer frees it, even while an
        exception is raised, queues it for the releasing thread (`Releases.keep`). None where a
        live import claims its address, NotImplemented where NumPy cannot make it (a device
        or dtype it does not take): the capsule is left as it was."""
        head = _read(inner, _DEFERRAL_HEAD[versioned])
        at = dl.TENSOR_AT[versioned]
        if head[at + 8 : at + 12] != _CPU or head[at + 20 : at + 24] not in _DTYPES:
            return NotImplemented
        if not _WORD.unpack_from(head, at)[0]:  # NULL data (no elements): NumPy would
            return NotImplemented  # allocate a dummy and export that; the box keeps NULL
        flags = _WORD.unpack_from(head, _FLAGS_AT)[0] if versioned else 0
        claimed = _WORD.unpack_from(head, at)[0] if claim else 0
        releases = self._releases
        if claimed and not releases.claim(claimed, inner):
            return None
        try:
            array = numpy.from_dlpack(cap.Held(capsule))
        except Exception:  # (NumPy leaves a capsule it refuses as it was)
            if claimed:
                releases.unclaim(claimed)
            return NotImplemented
        view = array.view()
        releases.keep(view, array, claimed)  # (array: what keeps the producer's tensor)
        out = view.__dlpack__(max_version=dl.MAX_VERSION)
        made = 0 if array.flags.writeable else dl.FLAG_READ_ONLY  # what NumPy's export says
        if flags != made:  # (a legacy tensor is writable)
            _poke(cap.pointer(out, True)[0] + _FLAGS_AT, _WORD.pack(flags), 8)
        return out


def capsule_boxes(releases: Any) -> NumpyBoxes | None:
    """NumPy's boxes where this NumPy can make them (2.3 and later), else None."""
    version = tuple(int(part) for part in numpy.__version__.split(".")[:2] if part.isdigit())
    return NumpyBoxes(releases) if version >= (2, 3) else None
