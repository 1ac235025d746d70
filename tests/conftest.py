import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The conformance run covers JAX's 64-bit types; tests/test_jax.py checks both modes itself.
os.environ.setdefault("JAX_ENABLE_X64", "1")


def pytest_collection_finish(session):
    """Freeze what collection left (the frameworks' modules, the test items): the many
    `gc.collect()` of the release-once tests then scan only what tests made since, 0.3 s a
    collection less with every framework imported. Nothing a test makes is ever frozen."""
    gc.collect()
    gc.freeze()
