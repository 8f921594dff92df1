#!/usr/bin/env bash
# Set up (first run only) and launch DuplexCadence. Until the desktop app lands this prints the
# plan of the default declaration; extra arguments replace the default command, e.g.
#   scripts/run.sh plan moshi --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
bin="${DUPLEXCADENCE_VENV:-.venv}/bin"
if (($#)); then
    exec "$bin/duplexcadence" "$@"
fi
exec "$bin/duplexcadence" plan minicpmo45_token2wav
