#!/usr/bin/env bash
# The CUDA matrix, as one script for a machine with an NVIDIA GPU where torch, jax and cupy
# (CUDA builds) are already installed: installs interop-hub and its adapters without touching
# those frameworks, asserts the GPU is visible, then runs the CUDA tests (every CUDA pair
# among PyTorch, JAX and CuPy: values, zero-copy by address, streams, device moves) and the
# CPU conformance kit for the same frameworks. Usage: bash ci/gpu-check.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
"$py" -m pip install --quiet --no-deps --no-build-isolation -e . -e adapters/numpy \
    -e adapters/torch -e adapters/jax -e adapters/cupy 2>/dev/null \
  || "$py" -m pip install --quiet --no-deps -e . -e adapters/numpy -e adapters/torch \
    -e adapters/jax -e adapters/cupy
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
export INTEROP_REQUIRE_GPU=1 JAX_ENABLE_X64=1
for fw in torch jax cupy; do "$py" ci/check_gpu.py "$fw"; done
"$py" -m interop list
"$py" -m pytest tests/test_cuda.py tests/test_cupy.py tests/test_streams.py -q -ra "$@"
"$py" -m pytest tests/test_conformance.py tests/test_numpy_torch.py tests/test_jax.py -q -ra \
    -k "not tensorflow and not mxnet and not paddle" "$@"
