"""interop-hub's benchmark suite: what the library costs against calling frameworks directly.

Run `python -m benchmarks --help`. Not part of the unit-test run.
"""
