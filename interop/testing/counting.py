"""DLPack capsules over memory this module owns, whose deleters count their calls.

They let tests prove that memory handed through DLPack is released exactly once, whatever
consumer takes it and however a conversion ends.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from .. import capsule as cap
from .. import dlpack as dl
from ..info import compact_strides


@dataclass
class Counter:
    """How many times the deleters of capsules made by `counting_capsule` ran, per tensor.

    Tensors are counted by a serial token, not by address (addresses are reused); a deleter
    call for a tensor already released is counted under `strays`.
    """

    calls: dict[int, int] = field(default_factory=dict)
    strays: int = 0
    _keep: dict[int, tuple[int, tuple[object, ...]]] = field(default_factory=dict)
    _serial: int = 0

    def released(self, token: int) -> int:
        return self.calls.get(token, 0)

    @property
    def alive(self) -> int:
        return len(self._keep)


COUNTER = Counter()


@dl.DELETER
def _count(address: int) -> None:
    entry = COUNTER._keep.pop(address, None)
    if entry is None:
        COUNTER.strays += 1
        return
    token = entry[0]
    COUNTER.calls[token] = COUNTER.calls.get(token, 0) + 1


_COUNT = ctypes.cast(_count, ctypes.c_void_p).value


def counting_capsule(
    payload: bytes,
    dtype: str,
    shape: tuple[int, ...],
    *,
    versioned: bool = True,
    read_only: bool = False,
    strides: tuple[int, ...] | None = None,
    byte_offset: int = 0,
    align: int = 64,
    version: tuple[int, int] = (1, 0),
    device: tuple[str, int] = ("cpu", 0),
) -> tuple[object, int]:
    """A CPU capsule over a copy of `payload`; returns it and a token for `COUNTER.released`.

    The data is placed `align`-byte aligned (plus `byte_offset`), so importers that need
    alignment (JAX) can share it. `device` only labels the tensor (for planning tests): the
    bytes always live in host memory, so only a CPU capsule may be read by a consumer.
    """
    code, bits = dl.DTYPE_CODES[dtype]
    raw = ctypes.create_string_buffer(len(payload) + align + byte_offset)
    start = (-ctypes.addressof(raw)) % align
    ctypes.memmove(ctypes.addressof(raw) + start + byte_offset, payload, len(payload))
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*(strides or compact_strides(shape)))
    mt: ctypes.Structure = dl.DLManagedTensorVersioned() if versioned else dl.DLManagedTensor()
    if versioned:
        mt.version.major, mt.version.minor = version  # type: ignore[attr-defined]
        mt.flags = dl.FLAG_READ_ONLY if read_only else 0  # type: ignore[attr-defined]
    t = mt.dl_tensor  # type: ignore[attr-defined]
    t.data = ctypes.addressof(raw) + start
    t.device.device_type, t.device.device_id = dl.DEVICE_CODES[device[0]], device[1]
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = byte_offset
    mt.deleter = _COUNT  # type: ignore[attr-defined]
    address = ctypes.addressof(mt)
    COUNTER._serial += 1
    COUNTER._keep[address] = (COUNTER._serial, (mt, raw, shape_arr, strides_arr))
    return cap.new_capsule(address, versioned), COUNTER._serial
