"""The canonical exchange object: one DLPack tensor taken from any producer, given to any consumer.

Whatever the source (a framework tensor, an object with `__dlpack__`, a legacy or versioned
capsule), the core holds exactly one capsule here and hands it on once, in the kind the
consumer asks for, bridging between capsule kinds when needed.
"""

from __future__ import annotations

from typing import Any

from . import capsule as cap
from . import dlpack as dl
from .errors import DLPackError, UnsupportedTensorError
from .info import Device, TensorInfo, read_capsule


def take_capsule(source: Any, *, versioned: bool, stream: Any = None) -> Any:
    """A DLPack capsule from `source` (itself, if it already is one)."""
    if cap.is_capsule(source):
        return source
    method = getattr(source, "__dlpack__", None)
    if method is None:
        raise UnsupportedTensorError(
            f"{type(source).__module__}.{type(source).__qualname__} is neither a tensor of an "
            f"installed framework adapter nor a DLPack producer (no __dlpack__)"
        )
    kwargs = {} if stream is None else {"stream": stream}
    if versioned:
        try:
            return method(max_version=dl.MAX_VERSION, **kwargs)
        except TypeError:  # a producer that predates DLPack 1.0's keywords
            pass
    return method(**kwargs)


class Exchange:
    """Holds one unconsumed DLPack capsule and gives it away once, as `__dlpack__` does.

    `immutable` marks memory that must not be written (an immutable-by-API source): versioned
    capsules made from it carry READ_ONLY, and a consumer that marks legacy imports read-only
    gets the legacy capsule as it is. `legacy_read_only_ok` allows read-only memory out
    as a legacy capsule, for consumers that cannot write it.
    """

    __slots__ = ("_capsule", "immutable", "info", "legacy_marks_read_only", "legacy_read_only_ok")

    def __init__(
        self,
        capsule: Any,
        info: TensorInfo,
        *,
        immutable: bool = False,
        legacy_read_only_ok: bool = False,
    ) -> None:
        self._capsule = capsule
        self.info = info
        self.immutable = immutable
        self.legacy_read_only_ok = legacy_read_only_ok
        #: the consumer marks whatever it takes from a legacy capsule read-only (NumPy)
        self.legacy_marks_read_only = False

    @classmethod
    def from_source(
        cls, source: Any, *, versioned: bool, stream: Any = None, framework: str | None = None
    ) -> Exchange:
        capsule = take_capsule(source, versioned=versioned, stream=stream)
        return cls(capsule, read_capsule(capsule, framework, versioned))

    @property
    def versioned(self) -> bool:
        return self.info.version is not None

    def take(self) -> Any:
        """The held capsule, as it is; the exchange is empty afterwards."""
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise DLPackError("this exchange object's tensor was already handed to a consumer")
        return capsule

    def take_as(self, versioned: bool, version: tuple[int, int] = dl.MAX_VERSION) -> Any:
        """The held capsule in the kind asked for, bridged if needed."""
        capsule = self.take()
        if versioned == self.versioned:
            return capsule
        return cap.bridge(
            capsule,
            to_versioned=versioned,
            version=version,
            read_only=self.info.read_only or self.immutable,
            allow_read_only=self.legacy_read_only_ok,
        )

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
        if max_version is not None and max_version[0] >= dl.MAJOR_VERSION:
            if self.immutable and self.legacy_marks_read_only and not self.versioned:
                return self.take()  # read-only either way: skip bridging (the spec allows it)
            return self.take_as(True, min(tuple(max_version), dl.MAX_VERSION))  # type: ignore[arg-type]
        return self.take_as(False)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: Device = self.info.device
        return (device.code, device.id)
