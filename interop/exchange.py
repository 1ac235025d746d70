"""The canonical exchange object: one DLPack tensor taken from any producer, given to any consumer.

Whatever the source (a framework tensor, an object with `__dlpack__`, a legacy or versioned
capsule), the core holds exactly one capsule here and hands it on once. Consumers that take
objects call its `__dlpack__`; adapters may read `info`, `take()` the capsule, `retag()` its
dtype or `release()` it unconsumed.
"""

from __future__ import annotations

from typing import Any

from . import capsule as cap
from . import dlpack as dl
from .errors import DLPackError, UnsupportedTensorError, describe
from .info import Device, TensorInfo, read_capsule


def take_capsule(source: Any, *, versioned: bool, stream: int | None = None) -> Any:
    """A DLPack capsule from `source` (itself, if it already is one)."""
    if cap.is_capsule(source):
        return source
    method = getattr(source, "__dlpack__", None)
    if method is None:
        raise UnsupportedTensorError(
            f"{describe(source)} is neither a tensor of an installed framework adapter nor a "
            f"DLPack producer (no __dlpack__)"
        )
    kwargs = {} if stream is None else {"stream": stream}
    capsule = None
    if versioned:
        try:
            capsule = method(max_version=dl.MAX_VERSION, **kwargs)
        except TypeError:  # a producer that predates DLPack 1.0's keywords
            pass
    if capsule is None:
        capsule = method(**kwargs)
    if not cap.is_capsule(capsule):
        raise DLPackError(
            f"{describe(source)}.__dlpack__() returned a {describe(capsule)}, not a DLPack capsule"
        )
    return capsule


class Exchange:
    """Holds one unconsumed DLPack capsule and gives it away once, as `__dlpack__` does."""

    __slots__ = ("_capsule", "_producer", "_stream", "info", "legacy_read_only_ok")

    def __init__(self, capsule: Any, info: TensorInfo) -> None:
        self._capsule = capsule
        self.info = info
        #: whether `__dlpack__` may hand a read-only tensor to a legacy-only consumer (one
        #: that only reads it: the core's NumPy copier under NumPy < 2.1)
        self.legacy_read_only_ok = False
        #: the GPU producer the capsule came from, and the stream it was ordered on: a
        #: consumer that names another stream gets a capsule taken again, ordered on its own
        self._producer: Any = None
        self._stream: int | None = None

    @classmethod
    def from_source(
        cls,
        source: Any,
        *,
        versioned: bool,
        stream: int | None = None,
        framework: str | None = None,
    ) -> Exchange:
        capsule = take_capsule(source, versioned=versioned, stream=stream)
        exchange = cls(capsule, read_capsule(capsule, framework, versioned))
        if stream is not None and not cap.is_capsule(source):
            exchange._producer, exchange._stream = source, stream
        return exchange

    @property
    def capsule(self) -> Any:
        """The held capsule, left held (None once taken)."""
        return self._capsule

    @property
    def versioned(self) -> bool:
        return self.info.version is not None

    def take(self) -> Any:
        """The held capsule, as it is; the exchange is empty afterwards."""
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise DLPackError("this exchange object's tensor was already handed to a consumer")
        return capsule

    def take_as(
        self,
        versioned: bool,
        *,
        read_only: bool = False,
        legacy_read_only_ok: bool = False,
        version: tuple[int, int] = dl.MAX_VERSION,
    ) -> Any:
        """The held capsule in the kind asked for, bridged if needed (READ_ONLY is set on a
        versioned bridge when `read_only`; a read-only tensor becomes a legacy capsule only
        with `legacy_read_only_ok`)."""
        capsule = self.take()
        if versioned == self.versioned:
            return capsule
        return cap.bridge(
            capsule,
            to_versioned=versioned,
            version=version,
            read_only=read_only or self.info.read_only,
            allow_read_only=legacy_read_only_ok,
        )

    def hold(self, capsule: Any) -> None:
        """Hold `capsule` (the same tensor, re-wrapped or bridged) instead of the old one."""
        self._capsule = capsule
        self._producer = None  # (taken again, it would lose the re-wrap)
        address, versioned = cap.pointer(capsule)
        version = None
        if versioned:
            mt = cap.managed(address, True)
            version = (mt.version.major, mt.version.minor)
        self.info = self.info._replace(version=version, deleter=True, manager_ctx=True)

    def retag(self, dtype: str) -> None:
        """Relabel the held tensor's dtype (same element size), for adapters whose framework
        stores a dtype its DLPack code path cannot name."""
        code, bits = dl.DTYPE_CODES[dtype]
        cap.retag(self._capsule, code, bits)
        self.info = self.info._replace(dtype=dtype)

    def release(self) -> None:
        """Drop the held capsule unconsumed: its destructor frees the producer's memory."""
        self._capsule = None

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if copy:
            raise BufferError("interop's exchange object never copies; plan the copy first")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"the tensor is on {self.info.device}; moving it to device {dl_device} is a copy"
            )
        reorder = stream is not None and stream != self._stream and self._producer is not None
        if reorder and self._capsule is not None:  # (taken already: the take below raises)
            self._order_on(stream)
        if max_version is not None and max_version[0] >= dl.MAJOR_VERSION:
            return self.take()  # either kind is fine for a consumer that names a version
        # a consumer of legacy capsules only (the plan bridged)
        return self.take_as(False, legacy_read_only_ok=self.legacy_read_only_ok)

    def _order_on(self, stream: int) -> None:
        """Take the capsule again, ordered on the consumer's `stream`: JAX hands producers a
        different stream on every import (XLA's pool of streams for external ready events),
        not the one it reported when the plan asked, and reads on the one it hands over."""
        fresh = take_capsule(self._producer, versioned=self.versioned, stream=stream)
        if read_capsule(fresh, self.info.framework, self.versioned).data != self.info.data:
            del fresh  # (its destructor releases it)
            raise DLPackError(
                f"{self.info.framework} exported other memory when asked again for stream {stream}"
            )
        self._capsule, self._stream = fresh, stream  # the first capsule's destructor frees it

    def __dlpack_device__(self) -> tuple[int, int]:
        device: Device = self.info.device
        return (device.code, device.id)
