#!/usr/bin/env bash
# The CUDA path end to end on a lent device machine (issue 18), in one run of at most 10 minutes
# that installs nothing from the network.
#
#   here, once:   bash scripts/device-prepare.sh          (downloads; prints the sizes below)
#   here, always: the rehearsal, every phase on this CPU with a tiny model (3 minutes); see
#                 scripts/device_check.py's docstring for the command
#   device tool:  run(command="bash scripts/device-check.sh", carry=[".device"], timeout_s=600)
#
# First run, 2026-12-04 (an H200, driver 580, nvcc 13.0, torch 2.11 cu130): the build took 272 s
# on 16 cores and the model phase 47-57 s, so the whole check may not fit one call: then
# `DEVICE_CHECK_STAGE=build` first and the rest at once after (the machine stays warm 30 s).
# That run found that torch and this llama.cpp build cannot share a process there (see
# scripts/device_check.py, "Processes"); serving alone measured, on the random-weight 1B model:
# bf16 41,398 prompt tok/s and 536 generated tok/s, Q4_K_M 25,731 and 564 (709-token prompt, 256
# greedy tokens). The round, swap and agreement phases have not run on a GPU yet.
#
# What travels (sizes as device-prepare.sh printed them, 2026-12-01):
#   the repo's tracked files                                      1.5 MB
#   .device/llama-cpp-python-0.3.36-trimmed.tar.gz                3.4 MB  (the sdist is 76.6 MB;
#       scripts/llama-trimmed.sh keeps llama_cpp/, llama.cpp's src, include, vendor, cmake, ggml
#       with its CPU and CUDA backends only, and convert_hf_to_gguf.py with its gguf-py)
#   .device/payload.tar.gz                                       10.5 MB
#       site/: bitsandbytes 0.50.2 with its CPU and CUDA 13.0/13.2 libraries only (8.2 MB
#       unpacked; the wheel's other 13 builds are 0.12 GB), pydantic 2.13.4 + pydantic-core 2.46.4
#       (cp312), pydantic-settings, annotated-types, typing-inspection, python-dotenv, gguf 0.19.0,
#       diskcache, typing-extensions: what clawd imports that the image lacks or has too old
#       tokenizer/: the bundled SmolLM2's tokenizer (3.4 MB unpacked)
#   in all about 15 MiB of the 64 MiB a call may carry. Unsloth (a 29 MB wheel, plus unsloth_zoo,
#   trl and xformers builds for the image's torch) does not travel: the round is the plain
#   QLoRA backend, which is what runs on CUDA without Unsloth.
# Used from the image (KINDS.md): python3 3.12 with torch 2.11 (cu130), transformers, peft,
# accelerate, safetensors, numpy, jinja2, sentencepiece, nvidia-ml-py; nvcc, cmake, ninja.
#
# Steps: build libllama + ggml (CPU and CUDA, for this GPU's compute capability only) with cmake
# and ninja from the trimmed tree, into /tmp/clawd-device (kept while the machine stays warm: a
# second call skips the build), then scripts/device_check.py: a random-weight 1B Llama built on the
# GPU, serving tok/s, a QLoRA round in the trainer child, conversion, a hot swap under streaming,
# logits agreement. Prints one JSON (also $OUT/device-check.json) with each phase's seconds.
# If the build alone runs past the limit, `DEVICE_CHECK_STAGE=build` builds and stops, and the
# next call (within the 30 s the machine stays warm) runs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
D=.device W=/tmp/clawd-device
[ -f "$D/payload.tar.gz" ] && [ -f "$D/llama-cpp-python-0.3.36-trimmed.tar.gz" ] || {
  echo "no .device/ here: run scripts/device-prepare.sh on a machine with network, then carry .device" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "no NVIDIA driver here" >&2; exit 1; }
mkdir -p "$W"
t0=$(date +%s)

[ -d "$W/site" ] || tar -xzf "$D/payload.tar.gz" -C "$W"
SRC=$W/llama_cpp_python-0.3.36
LIB=$SRC/llama_cpp/lib
build_s=0
if [ ! -f "$LIB/libllama.so" ]; then
  [ -d "$SRC" ] || tar -xzf "$D/llama-cpp-python-0.3.36-trimmed.tar.gz" -C "$W"
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  echo "[device-check] building llama.cpp for sm_$cc on $(nproc) cores" >&2
  b0=$(date +%s)
  # libllama and ggml only (llama-cpp-python loads just these; `common` and the tools are not
  # needed); flash-attention kernels stay in (ggml compiles them regardless), CUDA graphs on.
  cmake -S "$SRC/vendor/llama.cpp" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${cc}-real" -DGGML_NATIVE=ON -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >"$W/cmake.log" 2>&1 \
    || { tail -30 "$W/cmake.log" >&2; exit 1; }
  cmake --build "$W/build" -j "$(nproc)" >"$W/build.log" 2>&1 || { tail -40 "$W/build.log" >&2; exit 1; }
  mkdir -p "$LIB"
  find "$W/build" -name 'lib*.so*' -exec cp -P {} "$LIB/" \;
  build_s=$(( $(date +%s) - b0 ))
  echo "[device-check] built in ${build_s}s: $(ls "$LIB" | tr '\n' ' ')" >&2
fi
[ "${DEVICE_CHECK_STAGE:-all}" = build ] && exit 0

export PYTHONPATH="$W/site:$SRC:$PWD${PYTHONPATH:+:$PYTHONPATH}" LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1
python3 scripts/device_check.py "$W/run" --llama-src "$SRC/vendor/llama.cpp" --tokenizer "$W/tokenizer" --build-s "$build_s"
echo "[device-check] $(( $(date +%s) - t0 ))s in all" >&2
