#!/usr/bin/env bash
# PaddlePaddle's CPU wheel beside JAX and TensorFlow. paddlepaddle 3.3.1 pins
# opt_einsum==3.3.0, which would downgrade the opt_einsum JAX and TensorFlow share, so it is
# installed without its pins, plus the two packages `import paddle` needs that the others do
# not bring (see adapters/paddle/README.md). Usage: bash ci/install-paddle.sh path/to/python
set -euo pipefail
py="${1:-python3}"
pip() { "$py" -m pip --disable-pip-version-check "$@"; }
pip install --quiet --no-deps paddlepaddle==3.3.1
pip install --quiet httpx safetensors Pillow networkx "protobuf>=3.20.2" "opt_einsum>=3.3"
