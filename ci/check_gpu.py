"""Say whether a CUDA framework sees a GPU before its CUDA environment runs.

`python ci/check_gpu.py torch|jax|cupy`. On a GPU runner (INTEROP_REQUIRE_GPU=1) a missing
GPU is an error; elsewhere it prints why the CUDA tests will skip and exits 0.
"""

import os
import sys


def visible(framework: str) -> str:
    if framework == "torch":
        import torch

        count = torch.cuda.device_count()
        return f"torch {torch.__version__} sees {count} GPU(s)" if count else ""
    if framework == "jax":
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        return f"jax {jax.__version__} sees {gpus}" if gpus else ""
    if framework == "cupy":
        import cupy

        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError:
            count = 0
        return f"cupy {cupy.__version__} sees {count} GPU(s)" if count else ""
    raise SystemExit(f"unknown framework {framework!r}")


def main() -> int:
    framework = sys.argv[1]
    seen = visible(framework)
    if seen:
        print(seen)
        return 0
    if os.environ.get("INTEROP_REQUIRE_GPU") == "1":
        print(f"INTEROP_REQUIRE_GPU=1 but {framework} sees no GPU", file=sys.stderr)
        return 1
    print(f"{framework} sees no GPU here: the CUDA tests will skip and say so")
    return 0


if __name__ == "__main__":
    sys.exit(main())
