#!/usr/bin/env bash
# Install everything (ci/install.sh) and run the whole test suite in that environment.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
bash ci/install.sh "$venv"
export TF_CPP_MIN_LOG_LEVEL=3
"$venv/bin/python" -m ruff check interop adapters tests benchmarks
"$venv/bin/python" -m mypy interop
"$venv/bin/python" -m pytest tests -q -ra "$@"
