#!/usr/bin/env bash
# Run every check CI runs: set up, lint (ruff), type-check (mypy, strict on engine/), test (pytest).
# GPU tests skip where no CUDA device is present; their results come from bench/run_gpu.sh.
# Extra arguments go to pytest (e.g. scripts/test.sh -k carry).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Tools run as modules: the venv sees system site-packages, where a tool may already live.
py="${DUPLEXCADENCE_VENV:-.venv}/bin/python"
"$py" -m ruff check .
"$py" -m ruff format --check .
"$py" -m mypy engine adapters app
# Real audio in CI: a private PipeWire with a null sink whose monitor is the virtual microphone.
# Stopped again at exit (also on failure, Ctrl-C or SIGTERM) only if this run started it.
if audio_env="$(scripts/virtual_audio.sh)"; then
    eval "$audio_env"
    if [[ "${DUPLEXCADENCE_AUDIO_STARTED:-0}" == 1 ]]; then
        trap 'scripts/virtual_audio.sh --stop' EXIT
    fi
    export DUPLEXCADENCE_AUDIO=required  # from here on, audio tests must run, not skip
else
    echo "test: no virtual audio device (see the message above): audio tests will skip" >&2
fi
# The 30 slowest tests at the end of every run: where the suite's time goes (CI reads them).
"$py" -m pytest --durations=30 "$@"
