#!/usr/bin/env bash
# The CUDA checks, as one script for a machine with an NVIDIA GPU where torch, jax and cupy
# (CUDA builds) are already installed: installs interop-hub and its adapters without touching
# those frameworks, asserts the GPU is visible, then runs the CUDA tests (every CUDA pair
# among PyTorch, JAX and CuPy: values, zero-copy by address, streams, device moves, the
# conformance kit on cuda:0, chained conversions) on the compiled path and on the pure-Python
# one, the GPU cases of the gradient, safety and sources tests, and the CPU conformance kit
# for the same frameworks. Every step runs; the exit status says whether any failed.
# Usage: bash ci/gpu-check.sh [pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
"$py" -m pip install --quiet --no-deps --no-build-isolation -e . -e adapters/numpy \
    -e adapters/torch -e adapters/jax -e adapters/cupy 2>/dev/null \
  || "$py" -m pip install --quiet --no-deps -e . -e adapters/numpy -e adapters/torch \
    -e adapters/jax -e adapters/cupy || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
export INTEROP_REQUIRE_GPU=1 JAX_ENABLE_X64=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
failed=()
step() {  # step NAME COMMAND...: run it, remember a failure, go on
    local name="$1"
    shift
    echo "=== $name"
    "$@" || failed+=("$name")
}
for fw in torch jax cupy; do step "gpu visible to $fw" "$py" ci/check_gpu.py "$fw"; done
"$py" -m interop list
gpu_tests=(tests/test_cuda.py tests/test_cupy.py tests/test_streams.py)
gpu_cases=(tests/test_grad.py tests/test_safety.py tests/test_sources.py -k "gpu or cuda")
step "CUDA tests, compiled" "$py" -m pytest "${gpu_tests[@]}" -q -ra "$@"
step "CUDA tests, pure Python" env INTEROP_PURE_PYTHON=1 "$py" -m pytest "${gpu_tests[@]}" \
    -q -ra "$@"
step "GPU cases of other tests" "$py" -m pytest "${gpu_cases[@]}" -q -ra "$@"
step "CPU kit for torch, jax, numpy" env JAX_PLATFORMS=cpu "$py" -m pytest tests/test_conformance.py \
    tests/test_numpy_torch.py tests/test_jax.py -q -ra \
    -k "not tensorflow and not mxnet and not paddle" "$@"
if ((${#failed[@]})); then
    printf 'failed: %s\n' "${failed[@]}"
    exit 1
fi
echo "all GPU checks passed"
