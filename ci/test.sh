#!/usr/bin/env bash
# Install everything (ci/install.sh) and run the whole test suite in that environment, twice:
# with the compiled accelerator (interop._speedups, which must have been built) and with its
# pure-Python twin (INTEROP_PURE_PYTHON=1). Both must pass the same tests.
#
# The pure-Python run goes ahead even when the compiled one fails, so one CI run shows both.
# Each run spreads its tests over every core (pytest-xdist; INTEROP_TEST_WORKERS=0 runs them in
# one process): on 2 cores a run takes about 6 minutes instead of 10. `--dist loadgroup` keeps
# each `xdist_group` on one worker: tests/test_ray.py's tests share one Ray cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
bash ci/install.sh "$venv"
export TF_CPP_MIN_LOG_LEVEL=3
"$venv/bin/python" -m ruff check interop interop_pytest adapters tests benchmarks examples
"$venv/bin/python" -m ruff format --check interop interop_pytest adapters tests benchmarks examples
"$venv/bin/python" -m mypy interop interop_pytest
# The documentation site with its API reference, warnings as errors (a few seconds).
"$venv/bin/python" -m mkdocs build --strict  # into site/ (git ignores it)

workers="${INTEROP_TEST_WORKERS:-auto}"
status=0
echo "--- the whole suite, compiled fast path"
INTEROP_REQUIRE_SPEEDUPS=1 "$venv/bin/python" -m pytest tests -q -ra -p no:cacheprovider \
    -n "$workers" --dist loadgroup "$@" \
    || status=1
echo "--- the whole suite, pure-Python fast path"
INTEROP_PURE_PYTHON=1 "$venv/bin/python" -m pytest tests -q -ra -p no:cacheprovider \
    -n "$workers" --dist loadgroup "$@" \
    || status=1
exit "$status"
