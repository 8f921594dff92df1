#!/usr/bin/env bash
# Run every check CI runs: set up, lint (ruff), type-check (mypy, strict on engine/), test (pytest).
# GPU tests skip where no CUDA device is present; their results come from bench/run_gpu.sh.
# Extra arguments go to pytest (e.g. scripts/test.sh -k carry).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
bin="${DUPLEXCADENCE_VENV:-.venv}/bin"
"$bin/ruff" check .
"$bin/ruff" format --check .
"$bin/mypy" engine adapters app
"$bin/python" -m pytest "$@"
