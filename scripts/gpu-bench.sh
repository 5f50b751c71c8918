#!/usr/bin/env bash
# "Does it learn?" on a CUDA machine: bench/personalize.py with Unsloth QLoRA training and a
# >=1.5B instruct model, in one command, installing nothing from the network.
#
#   bash scripts/gpu-bench.sh WHEELS_DIR MODEL.gguf [bench/personalize.py flags...]
#
# WHEELS_DIR holds every wheel this needs, built or downloaded beforehand on a machine with the
# same Python and CUDA: llama-cpp-python 0.3.36 built with -DGGML_CUDA=ON, and `pip download`
# of "unsloth" "bitsandbytes>=0.45" transformers peft "openai>=1.40" matplotlib with their
# dependencies, plus clawd's own (fastapi, uvicorn, apscheduler, gguf, ...). MODEL.gguf is an instruct
# model with its chat template, e.g. Qwen2.5-1.5B-Instruct-Q4_K_M.gguf; training dequantizes it once.
#
# The defaults run one scenario through every method, 24 feedback turns each (the product goal:
# +0.5 adherence within 24 turns), in about 10 minutes on one modern GPU (not measured here: the
# machine this was written on has no GPU). Later flags override, e.g. --scenarios brevity,no_lists.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
WHEELS=$1 MODEL=$2
shift 2
PY=${PYTHON:-python3}
[ -d "$WHEELS" ] || { echo "no wheels directory at $WHEELS" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "no model file at $MODEL" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 || { echo "no NVIDIA driver here (nvidia-smi not found)" >&2; exit 1; }

# Offline from here on: pip, and the Hugging Face libraries Unsloth and transformers load.
export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
pipi() { "$PY" -m pip install --disable-pip-version-check -q --no-index --find-links "$WHEELS" "$@"; }
pipi "llama-cpp-python==0.3.36"
# --no-build-isolation: building clawd's editable install needs setuptools, taken from this environment.
pipi --no-build-isolation -e ".[cuda]" "openai>=1.40" matplotlib

"$PY" - <<'EOF'
import sys

import llama_cpp
import torch

if not llama_cpp.llama_supports_gpu_offload():
    sys.exit("llama-cpp-python in the wheels directory was built without CUDA: rebuild it with "
             "CMAKE_ARGS=-DGGML_CUDA=ON pip wheel llama-cpp-python==0.3.36")
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device: the wheels directory needs Unsloth's CUDA build of torch")
import unsloth  # noqa: F401  (fails here, not in the middle of a round, if it cannot load)

print(f"GPU: {torch.cuda.get_device_name(0)}; llama.cpp offloads; Unsloth {unsloth.__version__}")
EOF

# 32 feedback turns: two rounds at the daemon's own train_batch (16); the base is every curve's first point.
exec "$PY" bench/personalize.py --model "$MODEL" --scenarios brevity --methods rl,opd,combined \
  --turns 32 --out bench/out/gpu "$@"
