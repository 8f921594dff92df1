#!/usr/bin/env bash
# The H200 kit: what the GPU machine (Python 3.12, torch preinstalled, no network) needs beside the
# repository, in two ignored folders of ROOT (default: this checkout), rebuilt from nothing:
#
#   bench/kit.sh [ROOT] [personaplex]     (personaplex: only ROOT/.vendor/personaplex, anew)
#
#   ROOT/.whl/                  wheels for Python 3.12 of every package the `gpu` tests and the
#                               benchmarks import that the machine lacks (one site: run_gpu.sh
#                               installs them all into one folder)
#   ROOT/.vendor/minicpmo45/    MiniCPM-o 4.5's public model code (OpenBMB/MiniCPM-o-Demo
#                               MiniCPMO45/ at $DEMO_COMMIT) with the `as_duplex` shim appended
#                               (`librosa` and `flag_gems`, imported by the code but never used
#                               on the duplex path, are stood in by bench/minicpmo45.py)
#   ROOT/.vendor/personaplex/   NVIDIA/personaplex's python package (moshi/moshi/ at $PP_COMMIT,
#                               as ROOT/.vendor/personaplex/moshi, with its licences and COMMIT):
#                               bench/personaplex_vendor.py loads it under another name
#
# Needs pip (PyPI) and the demo repository: a git directory in $DEMO_GIT (default: the mirror the
# `fetch` tool makes, /work/.mirror/OpenBMB+MiniCPM-o-Demo/repo) or network to clone it; the same
# for PersonaPlex ($PP_GIT, default /work/.mirror/NVIDIA+personaplex/repo).
# Hand both folders to the device tool's `carry` (".whl", ".vendor"); together ~40 MiB.
#
# One huggingface_hub for everything: 0.36.2, inside both pins (moshi: <1.0,>=0.24; transformers
# 4.51: <1.0,>=0.30). huggingface_hub 2.x (with httpx2 & co.), which the kit had for Moshi
# before, fails transformers 4.51's import check ("huggingface-hub>=0.30.0,<1.0 is required"),
# so the Moshi and MiniCPM-o tests could not share a process.
set -euo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
py="${PYTHON:-python3}"
DEMO_COMMIT="${DEMO_COMMIT:-28b60cfb2a4d7156d045121e9ca2d31cd33f5d5d}"
DEMO_GIT="${DEMO_GIT:-/work/.mirror/OpenBMB+MiniCPM-o-Demo/repo}"
PP_COMMIT="${PP_COMMIT:-3428dfd95309a7f3c84fd93259ded0f810d1ff91}"
PP_GIT="${PP_GIT:-/work/.mirror/NVIDIA+personaplex/repo}"
whl="$root/.whl"
vendor="$root/.vendor/minicpmo45"
pp="$root/.vendor/personaplex"

# PersonaPlex's own code (MIT), never committed: its package imports itself as `moshi`, so it is
# kept apart from the PyPI `moshi` and loaded under another name (bench/personaplex_vendor.py).
personaplex() {
    rm -rf "$pp" && mkdir -p "$pp"
    if [[ ! -d "$PP_GIT" ]]; then
        PP_GIT="$(mktemp -d)/personaplex.git"
        git clone -q --bare https://github.com/NVIDIA/personaplex "$PP_GIT"
    fi
    git --git-dir="$PP_GIT" archive "$PP_COMMIT" moshi/moshi moshi/LICENSE.moshi \
        moshi/LICENSE.audiocraft | tar -x -C "$pp" --strip-components=1
    echo "$PP_COMMIT" > "$pp/COMMIT"
}
if [[ "${2:-}" == personaplex ]]; then  # this part alone: the rest of the kit is kept
    personaplex && du -sh "$pp" && exit 0
fi

rm -rf "$whl" && mkdir -p "$whl"
download() {
    "$py" -m pip download -q -d "$whl" --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 --abi abi3 --abi none \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform any "$@"
}
# The tests and the Token2Wav benchmark (pytest, the vendor oracle minicpmo-utils, VAD, audio I/O).
download pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0 pytest-timeout==2.4.0 hypothesis==6.155.2 \
    sortedcontainers==2.4.0 attrs==26.1.0 einops==0.8.2 platformdirs==4.14.9 silero-vad==6.2.3 \
    soxr==1.1.0 soundfile==0.14.0 cffi==2.0.0 pycparser==3.0 packaging==26.2 pyyaml==6.0.3
# The app's echo cancellation: `converse` checks for it while echo_cancel is on (the default).
download pywebrtc-audio==0.2.0
# The basic voice's question set (tests/basic_questions.py imports it: every test module is
# collected by `pytest -m gpu`, so its imports must resolve there too).
download jiwer==4.0.0 click==8.5.1 rapidfuzz==3.14.6
"$py" -m pip wheel -q -w "$whl" --no-deps minicpmo-utils==1.0.7  # a source archive only
# Moshi (its import reaches the hub client, never the hub).
download moshi==0.2.13 sentencepiece==0.2.3 safetensors==0.8.0
# MiniCPM-o 4.5's code: transformers 4.51.0 and what its import check demands; the hub client
# with what its import needs (not hf-xet: only downloads use it).
download transformers==4.51.0 tokenizers==0.21.4 huggingface-hub==0.36.2 \
    regex==2026.5.9 tqdm==4.70.1 requests==2.34.2 urllib3==2.7.0 idna==3.20 \
    charset-normalizer==3.4.7 certifi==2026.5.20 filelock==4.3.1 fsspec==2026.9.0 \
    pillow==12.2.0 typing-extensions==4.16.0
du -sh "$whl"

# The model code, never committed (the checkpoint's own code: the user's, run with consent).
rm -rf "$vendor" && mkdir -p "$vendor"
if [[ ! -d "$DEMO_GIT" ]]; then
    DEMO_GIT="$(mktemp -d)/demo.git"
    git clone -q --bare https://github.com/OpenBMB/MiniCPM-o-Demo "$DEMO_GIT"
fi
# File by file: a snapshot may lack its largest blobs (the mirror has no tokenizer.json).
git --git-dir="$DEMO_GIT" ls-tree "$DEMO_COMMIT" MiniCPMO45/ | while read -r _ _ blob path; do
    name="${path#MiniCPMO45/}"
    [[ "$name" == README* || "$name" == *_unified.py || "$name" == .gitignore ]] && continue
    git --git-dir="$DEMO_GIT" cat-file blob "$blob" > "$vendor/$name" 2>/dev/null \
        || { rm -f "$vendor/$name"; echo "kit.sh: $path is not in $DEMO_GIT (made below)"; }
done
if [[ ! -f "$vendor/tokenizer.json" ]]; then
    # transformers' own conversion of vocab.json + merges.txt + the added tokens, saved once so
    # each load does not convert again (needs transformers 4.51 here: MO45_SITE, a --target
    # folder made from PyPI if absent).
    site="${MO45_SITE:-$(mktemp -d)}"
    [[ -d "$site/transformers" ]] || "$py" -m pip install -q --no-deps --target "$site" \
        transformers==4.51.0 tokenizers==0.21.4 huggingface-hub==0.36.2 tqdm==4.70.1 \
        filelock==4.3.1 fsspec==2026.9.0 requests==2.34.2 urllib3==2.7.0 idna==3.20 \
        charset-normalizer==3.4.7 certifi==2026.5.20 packaging==26.2 pyyaml==6.0.3 \
        regex==2026.5.9 typing-extensions==4.16.0 safetensors==0.8.0
    PYTHONPATH="$site" HF_HUB_OFFLINE=1 "$py" - "$vendor" <<'TOKENIZER'
import sys
from transformers import Qwen2TokenizerFast
folder = sys.argv[1]
Qwen2TokenizerFast.from_pretrained(folder, local_files_only=True).backend_tokenizer.save(
    f"{folder}/tokenizer.json"
)
TOKENIZER
fi
# The released checkpoint's code builds the duplex object from the loaded model
# (`model.as_duplex(...)`); the public copy has only `MiniCPMODuplex(path)`, which loads a second
# model itself. This shim gives it the released entry point: the duplex constructor runs as
# written, handed the model already loaded (its `from_pretrained` answers with it meanwhile).
cat >> "$vendor/modeling_minicpmo.py" <<'SHIM'


# --- DuplexCadence bench/kit.sh: as_duplex shim (not the vendor's) ---
def _duplex_from_existing_model(cls, model, **kwargs):
    MiniCPMO.from_pretrained = classmethod(lambda _cls, *args, **kw: model)
    try:
        return cls(model.config._name_or_path, **kwargs)
    finally:
        del MiniCPMO.from_pretrained  # the inherited PreTrainedModel.from_pretrained again


def _as_duplex(self, **kwargs):
    return MiniCPMODuplex.from_existing_model(self, **kwargs)


MiniCPMODuplex.from_existing_model = classmethod(_duplex_from_existing_model)
MiniCPMO.as_duplex = _as_duplex
SHIM
echo "$DEMO_COMMIT" > "$vendor/DEMO_COMMIT"

personaplex
du -sh "$root/.vendor"
