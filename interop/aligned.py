"""64-byte aligned NumPy memory: JAX and TensorFlow share only 64-byte aligned host buffers,
and NumPy's allocator guarantees 16 bytes (malloc's), so NumPy arrays mostly reach them as a
copy. Inside `aligned_numpy()` (or after `set_aligned_numpy(True)`) NumPy allocates array data
through the accelerator's aligned allocator instead, and such arrays are shared zero-copy.

NumPy chooses its allocator per context (NEP 49 keeps it in a `contextvars` variable): a block
or the switch changes the calling thread's (or asyncio task's) allocations only. NumPy keeps
the allocator on each array and frees the array through it, also after the block ends.

The allocator is C (interop/_speedups.c): NumPy may call it without the GIL, where one
written in Python (a ctypes callback) would take the GIL at every allocation and free, inside
NumPy's own code. So the pure-Python twin refuses, with AlignedNumpyUnavailableError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .api import accelerated
from .capsule import RELEASES
from .errors import AlignedNumpyUnavailableError, InvalidArgumentError
from .registry import REGISTRY
from .roles import AlignedAllocator


def aligned_handler() -> Any:
    """The accelerator's NEP 49 "mem_handler" capsule, or why there is none."""
    handler = RELEASES.aligned_handler()
    if handler is None:
        raise AlignedNumpyUnavailableError(
            f"aligned NumPy memory needs interop's compiled accelerator, and {accelerated()} "
            "runs (an allocator in Python would take the GIL inside NumPy's allocator, which "
            "NumPy may call without it): install interop-hub where a C compiler is present (or "
            "run `python setup.py build_ext --inplace` in a clone) and leave "
            "INTEROP_PURE_PYTHON unset"
        )
    return handler


def _install(handler: Any | None) -> Any:
    """Make `handler` (None: NumPy's default) NumPy's allocator here; the one it replaces."""
    holder = REGISTRY.role_holder(AlignedAllocator)
    if holder is None:
        raise AlignedNumpyUnavailableError(
            "no adapter loaded declares the AlignedAllocator role (interop-numpy's does)"
        )
    return holder.set_memory_handler(handler)


@contextmanager
def aligned_numpy() -> Iterator[None]:
    """A block in which NumPy allocates array data 64-byte aligned (in this thread or task),
    so those arrays reach JAX and TensorFlow zero-copy. Arrays made inside stay valid after
    it. Raises AlignedNumpyUnavailableError where it cannot be had (the pure-Python twin)."""
    previous = _install(aligned_handler())
    try:
        yield
    finally:
        _install(previous)


def set_aligned_numpy(enabled: bool) -> None:
    """From now on, in the calling thread or task and those that start with a copy of its
    context (asyncio tasks; threads only under `-X thread_inherit_context`, Python 3.14),
    NumPy allocates 64-byte aligned (True) or with its default allocator (False)."""
    if not isinstance(enabled, bool):
        raise InvalidArgumentError(f"set_aligned_numpy takes True or False, not {enabled!r}")
    _install(aligned_handler() if enabled else None)
