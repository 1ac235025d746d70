#!/usr/bin/env bash
# MXNet 1.9.1 (the final release) declares numpy<2, which would break JAX. Install it without
# its pins plus the one package it imports at start-up (requests); graphviz is only needed for
# plotting networks. Usage: bash ci/install-mxnet.sh path/to/python
set -euo pipefail
py="${1:-python3}"
"$py" -m pip install --quiet --disable-pip-version-check --no-deps mxnet==1.9.1
"$py" -m pip install --quiet --disable-pip-version-check requests
