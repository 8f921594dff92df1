#!/usr/bin/env bash
# On a GPU machine with torch preinstalled and no network: run the `gpu` tests and the benchmarks,
# writing JSON results into OUT_DIR (copy them to bench/results/ and commit them with the code).
#
#   bench/run_gpu.sh OUT_DIR [pytest args...]
#
#   DUPLEXCADENCE_BENCH=tests   only the gpu tests     (about 5 minutes on an H200)
#   DUPLEXCADENCE_BENCH=bench   only the benchmarks    (about 15 minutes)
#   DUPLEXCADENCE_BENCH=all     both (the default)
#   DUPLEXCADENCE_BENCH=moshi   only bench/moshi.py (about 5 minutes; the 7B needs ~17 GB)
#   DUPLEXCADENCE_BENCH=personaplex   bench/personaplex.py, `converse --family personaplex`, then
#                               tests/gpu/test_personaplex_gpu.py with the pytest args given
#   DUPLEXCADENCE_BENCH_ARGS    extra arguments for bench/token2wav.py (e.g. "--profile eager S")
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
export DUPLEXCADENCE_GPU_RESULTS="$out/gpu_tests.jsonl"

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
exit "$status"
