import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The conformance run covers JAX's 64-bit types; tests/test_jax.py checks both modes itself.
os.environ.setdefault("JAX_ENABLE_X64", "1")
