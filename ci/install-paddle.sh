#!/usr/bin/env bash
# PaddlePaddle's CPU wheel. Usage: bash ci/install-paddle.sh path/to/python
set -euo pipefail
py="${1:-python3}"
"$py" -m pip install --quiet --disable-pip-version-check paddlepaddle
