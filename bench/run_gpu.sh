#!/usr/bin/env bash
# On a GPU machine with torch preinstalled and no network: run the `gpu` tests and the benchmarks,
# writing JSON results into OUT_DIR (copy them to bench/results/ and commit them with the code).
#
#   bench/run_gpu.sh OUT_DIR [pytest args...]
#
#   DUPLEXCADENCE_BENCH=tests   only the gpu tests     (well over 10 minutes on an H200 since
#                               MiniCPM-o's: 5 tests ran in 570 s on 2026-12-03; pass test
#                               files as pytest args to split them over 10-minute calls)
#   DUPLEXCADENCE_BENCH=bench   only the benchmarks    (about 15 minutes)
#   DUPLEXCADENCE_BENCH=all     both (the default)
#   DUPLEXCADENCE_BENCH=moshi   only bench/moshi.py (about 5 minutes; the 7B needs ~17 GB)
#   DUPLEXCADENCE_BENCH=minicpmo45  bench/minicpmo45.py on GPU 0 and tests/gpu/test_minicpmo45_gpu.py
#                               on GPU 1 (its seeds on GPUs 1 and 2 where there are three), each
#                               loading its own 17 GB; in turn on one GPU. Needs .vendor/minicpmo45
#                               (bench/kit.sh)
#   DUPLEXCADENCE_BENCH=capacity-t2w  bench/capacity.py for Token2Wav, 16/32/48/64 sessions on
#                               shared bindings, its one-process-per-session baseline, then
#                               their GPU tests (at most 9.7 minutes, ~5 expected)
#   DUPLEXCADENCE_BENCH=capacity-moshi  bench/capacity.py for Moshi (4 and 6 lanes), its
#                               one-process-per-session baseline, the multiplexer's gpu tests
#                               (at most 7.5 minutes, ~5 expected; DUPLEXCADENCE_CAP_TESTS=0:
#                               without the tests, at most 4.5 minutes)
#   DUPLEXCADENCE_BENCH=capacity  both, one after the other (two 10-minute calls: run them apart)
#   DUPLEXCADENCE_BENCH=personaplex   bench/personaplex.py, `converse --family personaplex`, then
#                               tests/gpu/test_personaplex_gpu.py with the pytest args given
#   DUPLEXCADENCE_BENCH=personaplex_vendor  bench/personaplex_vendor.py (our eager against
#                               NVIDIA/personaplex's own loop; needs .vendor/personaplex from
#                               bench/kit.sh), then tests/gpu/test_personaplex_gpu.py with the
#                               pytest args given; each part timed out (DUPLEXCADENCE_PP_VENDOR_S,
#                               default 300; DUPLEXCADENCE_PP_TESTS_S, default 210)
#   DUPLEXCADENCE_BENCH_ARGS    extra arguments for the benchmark (e.g. "--profile eager S")
#
# Wheels for packages the machine lacks may be placed in .whl/ (see bench/README.md); they are
# installed into a private folder first. Nothing here needs the network.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bench/run_gpu.sh OUT_DIR [pytest args...]}"; shift
mkdir -p "$out"

if compgen -G ".whl/*.whl" >/dev/null; then
    # A wheel is a zip laid out as site-packages: where pip is missing, unpacking it is installing.
    site=/tmp/duplexcadence-site
    mkdir -p "$site"
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl 2>"$out/wheels.log"; then
        echo "run_gpu.sh: pip could not install .whl/ (see $out/wheels.log); unpacking instead" >&2
        for w in .whl/*.whl; do python3 -m zipfile -e "$w" "$site"; done
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# cuBLAS picks its workspace per stream; a fixed config keeps eager and replay on the same kernels.
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
export PYTHONUNBUFFERED=1
# A process that dies of a signal (the HF compile peer once did) prints where, in its log.
export PYTHONFAULTHANDLER=1
export DUPLEXCADENCE_GPU_RESULTS="$out/gpu_tests.jsonl"
# Inductor's and Triton's caches in an ignored folder of the tree: the device tool keeps it
# between calls while the machine stays warm, so a compile cut by one call's limit is mostly
# cache hits in the next (the MiniCPM-o compile peer needs more than one 10-minute call).
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/.inductor}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$PWD/.inductor/triton}"

what="${DUPLEXCADENCE_BENCH:-all}"
status=0
python3 bench/env_info.py "bench/run_gpu.sh $out $*" > "$out/env.json"
if [[ "$what" == all || "$what" == tests ]]; then
    # tests/gui has no gpu tests and needs Qt and pytest-qt, which the GPU machine lacks.
    python3 -m pytest -m gpu -p no:cacheprovider -q --ignore=tests/gui \
        --junitxml="$out/gpu_tests.xml" "$@" 2>&1 \
        | tee "$out/gpu_tests.log"
    status=${PIPESTATUS[0]}
    python3 bench/collect.py "$out" > "$out/gpu_summary.json" || status=1
fi
if [[ "$what" == all || "$what" == bench ]]; then
    python3 bench/token2wav.py "$out" ${DUPLEXCADENCE_BENCH_ARGS:-} 2>&1 | tee "$out/token2wav.log" | grep -v '^capture'
    ((PIPESTATUS[0] == 0)) || status=1
fi
if [[ "$what" == moshi ]]; then
    python3 bench/moshi.py "$out" ${DUPLEXCADENCE_BENCH_ARGS:-} 2>&1 | tee "$out/moshi.log" | grep -v '^capture'
    ((PIPESTATUS[0] == 0)) || status=1
fi
if [[ "$what" == minicpmo45 ]]; then
    # The bench on GPU 0; the GPU test on GPU 1, or its two seeds on GPUs 1 and 2 where there are
    # three or more; all in turn on one GPU. Each process stops by DUPLEXCADENCE_MO45_LIMIT_S
    # (the bench writes its JSON after each phase).
    limit=(timeout -k 10 "${DUPLEXCADENCE_MO45_LIMIT_S:-510}")
    bench() {
        CUDA_VISIBLE_DEVICES="$1" "${limit[@]}" python3 bench/minicpmo45.py \
            --code .vendor/minicpmo45 --out "$out/minicpmo45_h200.json" \
            ${DUPLEXCADENCE_BENCH_ARGS:-} > "$out/minicpmo45.log" 2>&1
    }
    tests() {  # GPU, name, pytest args
        CUDA_VISIBLE_DEVICES="$1" "${limit[@]}" python3 -m pytest -m gpu -p no:cacheprovider -q \
            tests/gpu/test_minicpmo45_gpu.py --junitxml="$out/gpu_tests$2.xml" "${@:3}" \
            > "$out/gpu_tests$2.log" 2>&1
    }
    gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
    # DUPLEXCADENCE_MO45_TESTS=0: the bench alone (a one-GPU run that needs all its minutes).
    [[ "${DUPLEXCADENCE_MO45_TESTS:-1}" == 0 ]] && gpus=-1
    pids=()
    if ((gpus >= 3)); then
        tests 1 _seed0 -k seed0 "$@" & pids+=($!)
        tests 2 _seed1 -k seed1 "$@" & pids+=($!)
    elif ((gpus == 2)); then
        tests 1 "" "$@" & pids+=($!)
    fi
    bench 0 || status=1
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    ((gpus >= 2 || gpus < 0)) || tests 0 "" "$@" || status=1
    grep -v '^capture' "$out/minicpmo45.log" | tail -40
    ((gpus < 0)) || tail -n 15 "$out"/gpu_tests*.log
    python3 bench/collect.py "$out" > "$out/gpu_summary.json" || status=1
fi
# Capacity: each part under its own limit, so a slow one never eats the next; results are
# written after every level into a scratch folder, kept in OUT (capacity_<part>.json) and merged
# into OUT/capacity_h200.json (`bench/capacity.py bench/results --merge OUT` merges a run's parts
# over the committed file). Times per part estimated from the 2026-12-02 run (see bench/README).
parts=/tmp/capacity-parts
capacity() {  # limit, then bench/capacity.py's arguments
    local limit=$1; shift
    mkdir -p "$parts"
    timeout "$limit" python3 bench/capacity.py "$parts" "$@" 2>&1 | grep -v '^rejection\|^capture' \
        >> "$out/capacity.log" || status=1
}
if [[ "$what" == capacity || "$what" == capacity-t2w ]]; then
    # Token2Wav 16/32/48/64 on 8 lanes, 4 voices (one voice a lane: 8 sets of bindings, one
    # per lane and voice): load ~11 s; the 8 admissions that capture a set ~6.5 s each, the
    # 56 later ones an allocation (575 MiB) and a copy each, well under 1 s; a level ~9.5 s
    # (8 periods of 1 s); the exact check at 64 (each session alone, two eager) ~45 s.
    # ~2.5 minutes expected. At 32, once held, the level again while one more session opens
    # and closes beside it (~10 s). Then the shared bindings' GPU tests (~1 minute).
    capacity 345 --family synthetic --levels 16 32 48 64 --lanes 8 --voices 4 --periods 8 \
        --budget-s 250 --open-during 32
    # The one-process-per-session baseline: 8, then 16 processes, each loading the weights and
    # capturing its own graphs (~20 s in parallel), then 8 periods.
    capacity 150 --family synthetic --baseline --levels 8 16 --periods 8
    timeout 100 python3 -m pytest -m gpu -p no:cacheprovider -q -s tests/gpu/test_multiplex_gpu.py \
        -k shared 2>&1 | grep -v '^rejection\|^capture' > "$out/multiplex_shared_gpu_tests.log"
    ((PIPESTATUS[0] == 0)) || status=1
fi
if [[ "$what" == capacity || "$what" == capacity-moshi ]]; then
    # Moshi 4..12 on 4 lanes (~95 s: the first admission 18 s, then ~1 s each, a level 5 s),
    # then 8/10/12 on 6 lanes (10 on 4 lanes: 3 sessions a lane at ~28 ms > 80 ms), the
    # one-process-per-session baseline (2 and 4 processes), the multiplexer's GPU tests. At 8,
    # once held, the level again while a ninth session opens and closes beside it (~8 s).
    capacity 115 --family moshi --levels 4 6 8 10 12 --lanes 4 --periods 60 --budget-s 65 \
        --open-during 8
    capacity 100 --family moshi --levels 8 10 12 --lanes 6 --periods 60 --budget-s 55 \
        --tag _lanes6
    capacity 70 --family moshi --baseline --levels 2 4 --periods 60
    # DUPLEXCADENCE_CAP_TESTS=0: the capacity runs alone (their tests passed in an earlier call).
    [[ "${DUPLEXCADENCE_CAP_TESTS:-1}" == 0 ]] || {
    # Token2Wav on two lanes (its third session captured with its lane's probes) against eager
    # alone, the lane's stream, per-session memory; Moshi's (~2 minutes) is in DUPLEXCADENCE_BENCH=tests.
    timeout 170 python3 -m pytest -m gpu -p no:cacheprovider -q -s tests/gpu/test_multiplex_gpu.py \
        -k "(lane or memory) and not moshi and not shared" 2>&1 | grep -v '^rejection\|^capture' > "$out/multiplex_gpu_tests.log"
    ((PIPESTATUS[0] == 0)) || status=1
    }
fi
if [[ "$what" == capacity* ]]; then
    cp "$parts"/capacity_*.json "$out"/ 2>/dev/null
    python3 bench/capacity.py "$out" --merge "$parts" >> "$out/capacity.log" 2>&1
    tail -n 40 "$out/capacity.log"
    [[ -f "$out/multiplex_gpu_tests.log" ]] && tail -n 8 "$out/multiplex_gpu_tests.log"
    [[ -f "$out/multiplex_shared_gpu_tests.log" ]] && tail -n 8 "$out/multiplex_shared_gpu_tests.log"
fi
if [[ "$what" == personaplex ]]; then
    python3 bench/personaplex.py "$out" ${DUPLEXCADENCE_BENCH_ARGS:-} 2>&1 \
        | tee "$out/personaplex.log" | grep -v '^capture\|^rejection'
    ((PIPESTATUS[0] == 0)) || status=1
    # the app's own command end to end at the released shapes (random weights): 100 periods
    python3 -m app.cli converse --headless --family personaplex --device cuda --model-size full \
        --input assets/talk/question.flac --output "$out/personaplex_converse.wav" \
        --trace "$out/personaplex_converse.json" --seconds 100 --quiet --force \
        > "$out/personaplex_converse_summary.json" 2> "$out/personaplex_converse.log" || status=1
    python3 -m pytest -m gpu -p no:cacheprovider -q tests/gpu/test_personaplex_gpu.py \
        --junitxml="$out/gpu_tests.xml" "$@" 2>&1 | tee "$out/gpu_tests.log"
    ((PIPESTATUS[0] == 0)) || status=1
fi
if [[ "$what" == personaplex_vendor ]]; then
    # PersonaPlex's print()s each prompt part; its JSON is written after each run (a cut keeps it)
    timeout -k 10 "${DUPLEXCADENCE_PP_VENDOR_S:-300}" python3 bench/personaplex_vendor.py "$out" \
        ${DUPLEXCADENCE_BENCH_ARGS:-} 2>&1 | tee "$out/personaplex_vendor.log" \
        | grep -v '^Done loading'
    ((PIPESTATUS[0] == 0)) || status=1
    timeout -k 10 "${DUPLEXCADENCE_PP_TESTS_S:-210}" python3 -m pytest -m gpu -p no:cacheprovider \
        -q tests/gpu/test_personaplex_gpu.py --junitxml="$out/gpu_tests.xml" "$@" 2>&1 \
        | tee "$out/gpu_tests.log"
    ((PIPESTATUS[0] == 0)) || status=1
fi
exit "$status"
