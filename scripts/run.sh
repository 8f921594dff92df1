#!/usr/bin/env bash
# Set up (first run only) and launch DuplexCadence: the desktop app where there is a display,
# the headless demo conversation where there is none. Extra arguments replace the default
# command, e.g.
#   scripts/run.sh converse --headless --input me.wav --output it.wav --trace t.json --arm SRc
#   scripts/run.sh plan moshi --json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
bin="${DUPLEXCADENCE_VENV:-.venv}/bin"
if (($#)); then
    exec "$bin/duplexcadence" "$@"
fi
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
    exec "$bin/duplexcadence" gui
fi
echo "run: no display here: running the headless demo conversation (the window is" \
    "'scripts/run.sh gui' on a desktop, or 'xvfb-run -a scripts/run.sh gui')" >&2
exec "$bin/duplexcadence" demo
