"""Stream values handed to `__dlpack__(stream=...)`, normalised per device type in one place.

The Python DLPack spec gives the integers different meanings per device type:
- CUDA: 1 is the legacy default stream, 2 the per-thread default stream, any other positive
  value a `cudaStream_t`; 0 is disallowed (ambiguous). Frameworks report their default stream
  as 0 (`torch.cuda.current_stream().cuda_stream`), which means the legacy default: 1.
- ROCm: 0 is the default stream and 1 and 2 are disallowed.
- -1 everywhere: the producer must not synchronise at all.
- Devices without streams (CPU, ...): no stream is handed over.
"""

from __future__ import annotations

from typing import Any

from .dlpack import STREAM_DEVICES
from .errors import DeviceError, InvalidArgumentError

CUDA_LEGACY_DEFAULT = 1
CUDA_PER_THREAD_DEFAULT = 2
ROCM_DEFAULT = 0
NO_SYNC = -1


def as_int(stream: Any) -> int | None:
    """A user's stream as an integer: an int, or a framework stream object (`cuda_stream`
    for torch, `ptr` for CuPy, `handle`)."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise InvalidArgumentError(
        f"stream must be an int or a framework stream object, not {type(stream).__name__}"
    )


def normalize(device_type: str, stream: int | None) -> int | None:
    """The value to hand a producer on `device_type` for the consumer stream `stream`
    (None: the consumer named none, so its default stream is said explicitly)."""
    if device_type not in STREAM_DEVICES:
        return None
    if stream is not None and stream < NO_SYNC:
        raise DeviceError(f"stream {stream} is not a valid {device_type} stream")
    if device_type == "rocm":
        if stream in (1, 2):
            raise DeviceError(
                f"stream {stream} means nothing on ROCm (0 is its default stream; 1 and 2 are "
                "CUDA's legacy and per-thread default streams)"
            )
        return ROCM_DEFAULT if stream is None else stream
    if stream is None or stream == 0:
        return CUDA_LEGACY_DEFAULT
    return stream
