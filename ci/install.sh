#!/usr/bin/env bash
# Create a virtualenv (default .venv) with interop-hub, every adapter and the CPU frameworks.
# Usage: bash ci/install.sh [venv-dir]        (FRAMEWORKS="numpy torch" limits the adapters)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
frameworks="${FRAMEWORKS:-numpy torch jax tensorflow mxnet cupy paddle mlx}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
pip() { "$py" -m pip --disable-pip-version-check "$@"; }
pip install --quiet --upgrade pip setuptools wheel

pip install --quiet -r ci/requirements-cpu.txt
pip install --quiet -r ci/requirements-docs.txt  # the docs build ci/test.sh runs
# Ray, for interop.ray's tests (tests/test_ray.py skips without it); it changes no package above
pip install --quiet -r ci/requirements-ray.txt
# MXNet 1.9.1 pins numpy<2; installed without its pins it runs under NumPy 2 through the
# interop-mxnet adapter's compatibility shim (see adapters/mxnet/README.md).
case " $frameworks " in *" mxnet "*) bash ci/install-mxnet.sh "$py" ;; esac
case " $frameworks " in *" paddle "*) bash ci/install-paddle.sh "$py" ;; esac

pip install --quiet --no-deps -e .
for fw in $frameworks; do
    if [ -d "adapters/$fw" ]; then
        pip install --quiet --no-deps -e "adapters/$fw"
    fi
done
"$py" -m interop list
