"""The optional XLA FFI handler, built whenever a compiler is present (never required).

`interop_jax/_xla_ffi.c` lets `jax.jit` call a bridged function as an XLA custom call instead
of a host callback; without a compiler the build skips it (`optional=True`) and wrapped
functions keep using `jax.pure_callback` (see interop_jax/xla_ffi.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "interop_jax._xla_ffi",
            ["interop_jax/_xla_ffi.c"],
            depends=["interop_jax/_xla_ffi_abi.h"],
            optional=True,
        ),
    ]
)
