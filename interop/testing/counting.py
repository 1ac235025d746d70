"""DLPack capsules over memory this module owns, whose deleters count their calls.

They let tests prove that memory handed through DLPack is released exactly once, whatever
consumer takes it and however a conversion ends.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from .. import capsule as cap
from ..info import compact_strides


@dataclass
class Counter:
    """How many times the deleters of capsules made by `counting_capsule` ran, per tensor.

    Tensors are counted by a serial token, not by address (addresses are reused); a deleter
    call for a tensor already released is counted under `strays`.
    """

    calls: dict[int, int] = field(default_factory=dict)
    _serial: int = 0

    def released(self, token: int) -> int:
        return self.calls.get(token, 0)

    @property
    def strays(self) -> int:
        return cap.RELEASES.stray

    def _count(self, token: int) -> None:
        self.calls[token] = self.calls.get(token, 0) + 1


#: how often each `counting_capsule`'s memory was released (`COUNTER.released(token)`)
COUNTER = Counter()


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
    deleter: bool = True,
) -> tuple[object, int]:
    """A CPU capsule over a copy of `payload`; returns it and a token for `COUNTER.released`.

    The data is placed `align`-byte aligned (plus `byte_offset`), so importers that need
    alignment (JAX) can share it. `device` only labels the tensor (for planning tests): the
    bytes always live in host memory, so only a CPU capsule may be read by a consumer.
    Its manager_ctx is NULL, as the standard allows. With `deleter=False` its deleter is NULL
    too (also allowed: the producer keeps the memory alive itself), so the memory lives as
    long as the process and `COUNTER.released` stays 0.
    """
    raw = ctypes.create_string_buffer(len(payload) + align + byte_offset)
    start = (-ctypes.addressof(raw)) % align
    ctypes.memmove(ctypes.addressof(raw) + start + byte_offset, payload, len(payload))
    COUNTER._serial += 1
    token = COUNTER._serial
    capsule = cap.capsule_over(
        ctypes.addressof(raw) + start,
        shape,
        strides or compact_strides(shape),
        dtype,
        raw,
        device=device,
        read_only=read_only,
        versioned=versioned,
        version=version,
        byte_offset=byte_offset,
        on_release=lambda: COUNTER._count(token),
    )
    if not deleter:
        cap.managed(cap.pointer(capsule)[0], versioned).deleter = None
    return capsule, token
