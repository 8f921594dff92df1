#!/usr/bin/env bash
# Screenshot of the desktop app during a WAV-fed conversation, under a virtual X display:
#
#   scripts/screenshot.sh [OUT.png] [-- extra args of python -m app.gui.screenshot]
#   PYTHON=/path/to/python scripts/screenshot.sh ...   (another interpreter than .venv's)
#
# Writes docs/screenshot.png by default (the README shows it). Runs on machines without a
# display (CI): xvfb-run starts a private Xvfb screen; Qt uses its xcb platform there, which
# needs the libxcb-* packages (scripts/setup.sh installs them; QT_DEBUG_PLUGINS=1 names what
# is missing). The user's side is spoken by espeak-ng, the model is the small CPU Token2Wav.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/docs/screenshot.png}"
shift $(($# > 0 ? 1 : 0))
[[ "${1:-}" == "--" ]] && shift

# The interpreter: $PYTHON when set (the tests pass their own), else the checkout's .venv
# (scripts/setup.sh makes it), else python3 from PATH.
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
"$python" -c "import PySide6, torch" 2>/dev/null || {
    echo "screenshot: $python lacks PySide6 or torch: run scripts/setup.sh, or set PYTHON" >&2
    exit 1
}
command -v xvfb-run >/dev/null || {
    echo "screenshot: xvfb-run not found: apt-get install xvfb (or run scripts/setup.sh)" >&2
    exit 1
}
command -v espeak-ng >/dev/null || {
    echo "screenshot: espeak-ng not found: apt-get install espeak-ng" >&2
    exit 1
}

cd "$root"
# A screen larger than the window, 24-bit colour; the app picks xcb, not an inherited offscreen.
# DUPLEXCADENCE_SHOT_SCREEN=WxH for another screen: 200% scaling is a 4K screen's (3400x2160).
screen="${DUPLEXCADENCE_SHOT_SCREEN:-1700x1080}"
exec env -u QT_QPA_PLATFORM QT_QPA_PLATFORM=xcb \
    xvfb-run -a -s "-screen 0 ${screen}x24 -nolisten tcp" \
    "$python" -m app.gui.screenshot --out "$out" "$@"
