"""The optional C accelerator, built whenever a compiler is present (never required).

`interop/_speedups.c` speeds up the conversion fast path; without a compiler the build skips
it (`optional=True`) and the pure-Python twin in interop/routes.py is used.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("interop._speedups", ["interop/_speedups.c"], optional=True),
    ]
)
