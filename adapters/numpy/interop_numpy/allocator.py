"""NumPy's allocator hook (NEP 49), for `interop.aligned_numpy`: which allocator NumPy uses for
the data of the arrays it makes in the current context (`contextvars`: a thread, an asyncio
task). NumPy offers no Python call to set it (only `get_handler_name`), so its C API's
PyDataMem_SetHandler is called here through ctypes, with the GIL held, as a C extension would.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

from interop.capsule import held_pointer
from interop.errors import AlignedNumpyUnavailableError

#: the entries of NumPy's C API table (numpy/__multiarray_api.h), the same from 1.22 on
_SET_HANDLER, _DEFAULT_HANDLER = 304, 306


def _multiarray() -> Any:
    try:
        from numpy._core import _multiarray_umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath  # type: ignore[no-redef]
    return _multiarray_umath


@cache
def _hook() -> tuple[Any, Any]:
    """(PyDataMem_SetHandler, NumPy's default handler capsule), from NumPy 1.22 on."""
    import numpy

    umath = _multiarray()
    if not hasattr(umath, "get_handler_name"):
        raise AlignedNumpyUnavailableError(
            f"NumPy {numpy.__version__} has no allocator hook (NEP 49): upgrade to NumPy >= 1.22"
        )
    table = held_pointer(umath._ARRAY_API)
    entry = ctypes.c_void_p.from_address
    size = ctypes.sizeof(ctypes.c_void_p)
    set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(
        entry(table + _SET_HANDLER * size).value
    )
    default = ctypes.py_object.from_address(entry(table + _DEFAULT_HANDLER * size).value).value
    return set_handler, default


def set_handler(handler: Any | None) -> Any:
    """Make `handler` (a "mem_handler" capsule; None: NumPy's default) the allocator of the
    arrays NumPy makes in the current context from now on; returns the one it replaces."""
    setter, default = _hook()
    return setter(default if handler is None else handler)
