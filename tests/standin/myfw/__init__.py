"""myfw: a tiny NumPy-backed stand-in for the example framework of docs/plugins.md.

It exists so that the page's worked example (the `interop-myfw` plugin) runs through the
conformance kit in the test suite (tests/test_plugins_doc.py). It behaves like a small real
framework: tensors own or share memory through DLPack, its importer refuses negative strides,
read-only memory stays read-only, and it has a handful of kernels (add, sum, logical not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__version__ = "2.1.0"


class Tensor:
    """A myfw tensor: a view of memory, with DLPack both ways."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    # --- description -----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def dtype(self) -> str:
        return self._array.dtype.name

    @property
    def writable(self) -> bool:
        return bool(self._array.flags.writeable)

    def data_ptr(self) -> int:
        """Address of the first element."""
        return int(self._array.__array_interface__["data"][0])

    def tobytes(self) -> bytes:
        """The elements in row-major order."""
        return self._array.tobytes(order="C")

    # --- views and copies ------------------------------------------------------------------
    @property
    def T(self) -> Tensor:
        return Tensor(self._array.T)

    def __getitem__(self, index: Any) -> Tensor:
        return Tensor(self._array[index])

    def reshape(self, shape: tuple[int, ...]) -> Tensor:
        return Tensor(self._array.reshape(shape))

    def astype(self, dtype: str) -> Tensor:
        return Tensor(self._array.astype(dtype))

    def clone(self) -> Tensor:
        """A fresh, compact, writable copy."""
        return Tensor(np.array(self._array, order="C", copy=True))

    # --- kernels ---------------------------------------------------------------------------
    def __setitem__(self, index: Any, value: Any) -> None:
        if not self.writable:
            raise ValueError("myfw: this tensor is read-only")
        self._array[index] = value

    def __add__(self, other: Tensor) -> Tensor:
        return Tensor(np.add(self._array, other._array))

    def sum(self) -> Tensor:
        """The sum of all elements, as a 0-d tensor (booleans: how many are True)."""
        return Tensor(np.asarray(self._array.sum()))

    # --- DLPack ----------------------------------------------------------------------------
    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def tensor(values: list[Any], dtype: str) -> Tensor:
    return Tensor(np.array(values, dtype=dtype))


def logical_not(x: Tensor) -> Tensor:
    return Tensor(np.logical_not(x._array))


def from_dlpack(source: Any) -> Tensor:
    """Import any DLPack producer (zero-copy); reversed views (a negative stride on a
    dimension longer than one, with elements) are refused."""
    array = np.from_dlpack(source)
    if array.size and any(s < 0 for n, s in zip(array.shape, array.strides, strict=True) if n > 1):
        raise ValueError("myfw cannot hold negative strides")
    return Tensor(array)
