#!/usr/bin/env bash
# Make .device/, what scripts/device-check.sh needs beside the repo on a device machine that
# cannot reach the network. Run it here, where pip can download; it prints every file's size.
#
#   bash scripts/device-prepare.sh [SDIST.tar.gz]
#
# Writes (and adds /.device/ to git's info/exclude, so it travels only when `carry` names it):
#   .device/llama-cpp-python-0.3.36-trimmed.tar.gz   scripts/llama-trimmed.sh of the sdist
#   .device/payload.tar.gz
#     site/        Python packages the device image lacks (KINDS.md lists what it has), unpacked
#                  from their wheels for CPython 3.12 x86-64: bitsandbytes 0.50.2 with only its CPU
#                  and CUDA 13.x libraries (the image's torch is cu130; the wheel's other 13
#                  builds are 0.12 GB), gguf, diskcache, pydantic, pydantic-core, pydantic-settings,
#                  annotated-types, typing-inspection, python-dotenv, typing-extensions (pydantic needs
#                  a newer one than the image may have)
#     tokenizer/   the bundled SmolLM2's tokenizer as transformers reads it from its GGUF: the
#                  random-weight model the check builds speaks it
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=.device
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

SDIST=${1:-}
if [ -z "$SDIST" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==0.3.36" -d "$TMP/sdist"
  SDIST=$(ls "$TMP"/sdist/llama_cpp_python-0.3.36.tar.gz)
fi
bash scripts/llama-trimmed.sh "$SDIST" "$OUT/llama-cpp-python-0.3.36-trimmed.tar.gz"

# The same versions as this machine's, where clawd's tests pass.
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
pkgs=(bitsandbytes==0.50.2)
for p in gguf diskcache pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv typing-extensions; do
  pkgs+=("$p==$(ver "$p")")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$TMP/whl" "${pkgs[@]}"
mkdir -p "$TMP/payload/site"
for w in "$TMP"/whl/*.whl; do
  "$PY" -m zipfile -e "$w" "$TMP/payload/site"
done
find "$TMP/payload/site/bitsandbytes" -name 'libbitsandbytes_*.so' \
  ! -name 'libbitsandbytes_cpu.so' ! -name 'libbitsandbytes_cuda13*.so' -delete

"$PY" - "$TMP/payload/tokenizer" <<'EOF'
import sys

from transformers import AutoTokenizer

from clawd.config import bundled_model_path

path = bundled_model_path()
AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(sys.argv[1])
EOF
tar -czf "$OUT/payload.tar.gz" -C "$TMP/payload" site tokenizer

exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
echo "what travels besides the repo (carry: [\".device\"]):"
du -b "$OUT"/* | awk '{printf "  %10d  %s\n", $1, $2; t += $1} END {printf "  %10d  total (%.1f MiB)\n", t, t / 1048576}'
echo "  $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes of tracked files in the repo"
