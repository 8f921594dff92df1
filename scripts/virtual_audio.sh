#!/usr/bin/env bash
# A virtual sound card for headless machines (CI, servers), idempotently:
# a private D-Bus session bus, PipeWire, WirePlumber and pipewire-pulse run as the current user
# (root in CI; no systemd needed) in their own runtime folder, with a null sink whose monitor is
# the default source: what is played to the sink comes back as the virtual microphone. Both are
# made default, and the script waits until PortAudio sees them through the ALSA `pipewire` and
# `default` PCMs (pipewire-alsa). It prints `export VAR=...` lines for the caller to eval:
#
#   eval "$(scripts/virtual_audio.sh)"          # start (or reuse) it; then run the app or pytest
#   scripts/virtual_audio.sh --stop             # stop the processes this script started
#
# DUPLEXCADENCE_AUDIO_STARTED=1 among the exports says this call started the instance (0: it
# reused a running one), so a caller stops only what it started (scripts/test.sh does).
#
# Being private, it never touches a desktop's own audio session: WirePlumber gets its own config
# (hardware, Bluetooth and camera monitors off) and state folders, and the ALSA plugin follows
# PIPEWIRE_RUNTIME_DIR. Concurrent callers are serialized with a lock; a second call reuses a
# running instance. Needs: pipewire pipewire-pulse pipewire-alsa wireplumber dbus
# pulseaudio-utils (scripts/setup.sh installs them).
#
#   DUPLEXCADENCE_AUDIO_DIR   runtime folder (default ${TMPDIR:-/tmp}/duplexcadence-audio-$UID)
#   DUPLEXCADENCE_AUDIO_SINK  null sink name (default duplexcadence)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${DUPLEXCADENCE_AUDIO_DIR:-${TMPDIR:-/tmp}/duplexcadence-audio-$(id -u)}"
sink="${DUPLEXCADENCE_AUDIO_SINK:-duplexcadence}"

die() {
    echo "virtual_audio: $*" >&2
    exit 1
}
log() { echo "virtual_audio: $*" >&2; }

for tool in dbus-daemon pipewire wireplumber pipewire-pulse pactl flock; do
    command -v "$tool" >/dev/null ||
        die "'$tool' not found: run scripts/setup.sh (or apt-get install pipewire pipewire-pulse \
pipewire-alsa wireplumber dbus pulseaudio-utils util-linux)"
done
[[ -e /usr/share/alsa/alsa.conf.d/50-pipewire.conf || -e /etc/alsa/conf.d/50-pipewire.conf ]] ||
    die "PortAudio reaches PipeWire through ALSA: apt-get install pipewire-alsa"

mkdir -p "$dir"
chmod 700 "$dir"
export XDG_RUNTIME_DIR="$dir"
export PIPEWIRE_RUNTIME_DIR="$dir"
export DBUS_SESSION_BUS_ADDRESS="unix:path=$dir/bus"
export PULSE_SERVER="unix:$dir/pulse/native"
export PULSE_RUNTIME_PATH="$dir/pulse"

# A recorded daemon is alive when its pid runs the same program and is not a zombie (an init
# that does not reap would leave one); this also keeps --stop off a recycled pid.
alive() {
    local pid comm state
    [[ -f "$dir/$1.pid" ]] || return 1
    pid="$(cat "$dir/$1.pid")"
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    state="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)"
    [[ "$state" != Z && "$comm" == "${2:-$1}"* ]]
}

stop_one() {  # stop a daemon this script started (by its recorded pid only)
    local pid
    if alive "$1" "${2:-$1}"; then
        pid="$(cat "$dir/$1.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do alive "$1" "${2:-$1}" || break; sleep 0.1; done
    fi
    rm -f "$dir/$1.pid"
}

stop_all() {
    stop_one pipewire-pulse
    stop_one wireplumber
    stop_one pipewire
    stop_one dbus dbus-daemon
    rm -f "$dir/bus" "$dir/pipewire-0" "$dir/pipewire-0.lock" "$dir/pipewire-0-manager" \
        "$dir/pipewire-0-manager.lock"
}

# Start a daemon detached (its own session, so it outlives this script), recording its pid;
# fd 9 (the lock) is closed in it, or the daemon would hold the lock for life.
spawn() {
    local name="$1"
    shift
    setsid "$@" >"$dir/$name.log" 2>&1 </dev/null 9>&- &
    echo $! >"$dir/$name.pid"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local secs="$1" what="$2"
    shift 2
    for _ in $(seq $((secs * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$what did not come up within ${secs}s (logs in $dir/*.log)"
}

write_wireplumber_config() {
    # Hardware, Bluetooth and camera monitors off: a private instance must not grab real devices.
    mkdir -p "$dir/config/wireplumber/main.lua.d" "$dir/config/wireplumber/bluetooth.lua.d" \
        "$dir/state"
    cat >"$dir/config/wireplumber/main.lua.d/51-duplexcadence.lua" <<'LUA'
alsa_monitor.enabled = false
v4l2_monitor.enabled = false
libcamera_monitor.enabled = false
LUA
    cat >"$dir/config/wireplumber/bluetooth.lua.d/51-duplexcadence.lua" <<'LUA'
bluez_monitor.enabled = false
LUA
}

started=0
start_all() {
    if ! alive dbus dbus-daemon; then
        started=1
        rm -f "$dir/bus"
        dbus-daemon --session --fork --nopidfile --print-pid=3 \
            --address="$DBUS_SESSION_BUS_ADDRESS" 3>"$dir/dbus.pid" >/dev/null 9>&-
        wait_for 5 "D-Bus session bus" test -S "$dir/bus"
    fi
    if ! alive pipewire; then
        # Its clients may outlive a dead server (pipewire-pulse does, WirePlumber takes a
        # moment to notice): restart them with it rather than race their exit.
        stop_one pipewire-pulse
        stop_one wireplumber
        rm -f "$dir/pipewire-0" "$dir/pipewire-0.lock"
        started=1
        spawn pipewire pipewire
        wait_for 10 "PipeWire" pw-cli -r "pipewire-0" info 0
    fi
    if ! alive wireplumber; then
        write_wireplumber_config
        spawn wireplumber env XDG_CONFIG_HOME="$dir/config" XDG_STATE_HOME="$dir/state" wireplumber
    fi
    if ! alive pipewire-pulse; then
        spawn pipewire-pulse pipewire-pulse
    fi
    wait_for 10 "pipewire-pulse" pactl info
}

ensure_sink() {
    if ! pactl list short sinks | awk '{print $2}' | grep -qx "$sink"; then
        pactl load-module module-null-sink sink_name="$sink" rate=48000 channels=2 \
            sink_properties=device.description=DuplexCadence-Virtual >/dev/null
    fi
    # Retried: the defaults live in WirePlumber's metadata, which may not be up yet.
    wait_for 15 "the default sink $sink and source $sink.monitor" set_defaults
}

set_defaults() {
    local info
    pactl set-default-sink "$sink" && pactl set-default-source "$sink.monitor" &&
        info="$(pactl info)" &&
        grep -qx "Default Sink: $sink" <<<"$info" &&
        grep -qx "Default Source: $sink.monitor" <<<"$info"
}

# PortAudio lists the ALSA PCM `pipewire` (and `default`, routed to it by pipewire-alsa) only
# once the server answers; `pipewire` is the one that follows PIPEWIRE_RUNTIME_DIR.
portaudio_sees_it() {
    local py="${DUPLEXCADENCE_VENV:-$root/.venv}/bin/python"
    [[ -x "$py" ]] || py=python3
    if ! "$py" -c "import sounddevice" 2>/dev/null; then
        log "skipping the PortAudio check: no sounddevice in $py"
        return 0
    fi
    wait_for 10 "PortAudio's view of the device" "$py" -c '
import sounddevice as sd, sys
names = {d["name"] for d in sd.query_devices()
         if d["max_input_channels"] > 0 and d["max_output_channels"] > 0}
sys.exit(0 if "pipewire" in names else 1)'
}

if [[ "${1:-}" == "--stop" ]]; then
    exec 9>"$dir/lock"
    flock 9
    stop_all
    log "stopped the instance in $dir"
    exit 0
fi
[[ $# -eq 0 ]] || die "usage: eval \"\$($0)\"  |  $0 --stop"

exec 9>"$dir/lock"
flock -w 60 9 || die "another virtual_audio.sh holds $dir/lock for over 60 s"
# What this call started is stopped again if it cannot bring the device up.
trap '[[ $? -eq 0 || $started -eq 0 ]] || stop_all' EXIT
start_all
ensure_sink
portaudio_sees_it
log "up: sink '$sink', default source '$sink.monitor' (runtime $dir)"
for var in XDG_RUNTIME_DIR PIPEWIRE_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS PULSE_SERVER \
    PULSE_RUNTIME_PATH; do
    printf 'export %s=%q\n' "$var" "${!var}"
done
printf 'export DUPLEXCADENCE_AUDIO_DIR=%q\n' "$dir"
printf 'export DUPLEXCADENCE_AUDIO_SINK=%q\n' "$sink"
printf 'export DUPLEXCADENCE_AUDIO_STARTED=%d\n' "$started"
