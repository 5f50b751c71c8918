#!/usr/bin/env bash
# The llama-cpp-python source trimmed to what a CUDA (or CPU) build of libllama and the Python
# package need, so that it travels to a device machine inside its 64 MiB per call.
#
#   bash scripts/llama-trimmed.sh SDIST.tar.gz OUT.tar.gz
#
# SDIST is llama-cpp-python's sdist (76 MB: `pip download --no-deps --no-binary :all:
# llama-cpp-python==0.3.36`; the installed package has no C sources, design §12). Kept:
#   llama_cpp/                      the Python package (ctypes bindings, _internals)
#   vendor/llama.cpp/{CMakeLists.txt,cmake,include,src,vendor,LICENSE}
#   vendor/llama.cpp/ggml/          ggml-base, and only the CPU and CUDA backends
#   vendor/llama.cpp/convert_hf_to_gguf.py, conversion/, gguf-py/gguf/   HF → GGUF, with the
#                                   gguf-py it must run with (the PyPI gguf lacks what it imports)
# Left out: models/ (75 MB of tokenizer test vocabularies), docs/, tools/, examples/, tests/,
# common/ (a build of libllama alone does not need it), every other ggml backend (Metal, Vulkan,
# SYCL, HIP, OpenCL, ...), media/. Prints the tarball's size.
set -euo pipefail
if [ $# -ne 2 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
SDIST=$(realpath "$1") OUT=$(realpath -m "$2")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
tar -xzf "$SDIST" -C "$TMP"
SRC=$(find "$TMP" -mindepth 1 -maxdepth 1 -type d -name 'llama_cpp_python-*' | head -1)
[ -n "$SRC" ] || { echo "$SDIST is not a llama-cpp-python sdist" >&2; exit 1; }
NAME=$(basename "$SRC")
L=vendor/llama.cpp
keep=(
  "$NAME/pyproject.toml" "$NAME/CMakeLists.txt" "$NAME/LICENSE.md" "$NAME/llama_cpp"
  "$NAME/$L/CMakeLists.txt" "$NAME/$L/LICENSE" "$NAME/$L/cmake" "$NAME/$L/include" "$NAME/$L/src" "$NAME/$L/vendor"
  "$NAME/$L/ggml/CMakeLists.txt" "$NAME/$L/ggml/cmake" "$NAME/$L/ggml/include"
  "$NAME/$L/convert_hf_to_gguf.py" "$NAME/$L/conversion" "$NAME/$L/gguf-py/gguf"
)
# ggml/src: its own files, and the CPU and CUDA backends only (ggml_add_backend adds a backend's
# directory only when it is enabled, so the others can be missing)
for f in "$SRC/$L/ggml/src/"*; do
  case "$(basename "$f")" in
    ggml-*) [ -d "$f" ] || keep+=("$NAME/$L/ggml/src/$(basename "$f")") ;;
    *) keep+=("$NAME/$L/ggml/src/$(basename "$f")") ;;
  esac
done
keep+=("$NAME/$L/ggml/src/ggml-cpu" "$NAME/$L/ggml/src/ggml-cuda")
mkdir -p "$(dirname "$OUT")"
tar -czf "$OUT" -C "$TMP" --exclude='__pycache__' --exclude='llama_cpp/lib' "${keep[@]}"
echo "$OUT: $(du -b "$OUT" | cut -f1) bytes ($(du -h "$OUT" | cut -f1)); from $(du -b "$SDIST" | cut -f1) bytes"
