#!/usr/bin/env bash
# Tool calls through the stock OpenClaw, measured on small tasks (bench/tools/task_set.py) for
# several backends in one run (opt-in: slow, needs the npm registry, not part of CI).
#
#   scripts/openclaw-tools.sh                                  # all tasks, configurations clawd,nogrammar,llama
#   scripts/openclaw-tools.sh --tasks 3 --configs clawd        # the first 3 tasks, clawd only
#   scripts/openclaw-tools.sh --tasks exec_echo,read_port --configs oracle   # the bench itself, no model
#
# Configurations, each on the same model (scripts/qwen-model.sh, --ctx $CLAWD_TOOLS_CTX):
#   clawd      `python -m clawd serve`, tool grammar on (the default); auto_learn off for both
#   nogrammar  the same with CLAWD_TOOL_GRAMMAR=0 (calls parsed from free text)
#   llama      `python -m llama_cpp.server --chat_format chatml-function-calling`, behind
#              bench/tools/wire.py's proxy, which logs what it answered (it has no database) and
#              asks it for whole answers: it cannot stream a call under tool_choice auto (HTTP 500,
#              "Automatic streaming tool choice is not supported"); CLAWD_TOOLS_LLAMA_STREAM=1
#              passes OpenClaw's streamed requests through as they are. Its auto mode first picks
#              "functions.NAME" or "message" under a grammar; the message branch is decoded under
#              the follow-up grammar (a function name or the end), so a text answer comes out as
#              `functions.exec:` (counted as a call as text), never as prose
#   oracle     bench/tools/wire.py answering each task with its scripted calls: checks the tasks,
#              OpenClaw's tools and the workspace handling without a model (not in the default set)
#
# What it does: installs Node 24 and OpenClaw once (scripts/openclaw-lib.sh), writes one isolated
# OpenClaw home in a temporary directory (environment emptied; bootstrap files off, so the
# workspace holds only a task's files; tools.exec.mode "full": commands really run, with the
# workspace as their working directory; read/write/edit limited to the workspace). OpenClaw runs
# in a mount namespace where everything but that home is read-only, so nothing the model runs can
# write outside the temporary directory. Then per configuration: start the backend, run
# `bench/tools/tasks.py run` (a fresh workspace and a new OpenClaw session per task; outcome checks
# in Python; calls from clawd's `turns` or the wire log), stop the backend. Last,
# `bench/tools/tasks.py summary` writes --out (bench/results/tool_tasks.json): per configuration the
# share of tasks whose right tool ran with valid arguments and whose check passed, malformed calls,
# seconds per task, and every task's details.
#
# Knobs: CLAWD_TOOLS_PORT (19751; the llama server takes the next port), CLAWD_TOOLS_CTX (32768),
# CLAWD_TOOLS_MODEL (default: the Qwen file), CLAWD_TOOLS_MAX_TOKENS (1024), CLAWD_TOOLS_TIMEOUT
# (OpenClaw's per-request timeout, 1800: a cold first prompt on 2 busy cores takes minutes),
# CLAWD_TOOLS_CAP_S (300) and CLAWD_TOOLS_MAX_CALLS (8): each task's caps, past which it fails with
# the reason (bench/tools/tasks.py),
# CLAWD_TOOLS_EXEC_MODE (full), CLAWD_TOOLS_JAIL (auto: the jail when unshare can make it, else
# refuse; 0 runs without it), CLAWD_TOOLS_KEEP=1 (keep the work directory), OPENCLAW_VERSION,
# PYTHON. On a shared machine run it under `nice -n 15`.
#
# What OpenClaw sends (2026.9.6): 12 tools (apply_patch, edit, exec, ls, openclaw, process, read,
# sessions_yield, tool_call, tool_describe, tool_search, write), tool_choice auto, stream, the
# provider's maxTokens, no sampling parameters (clawd samples at its default temperature 0.8, so
# runs differ). Its system prompt here is ~21k characters, 7.9k Qwen tokens (bootstrap files off;
# 40k characters with them). Tool paths resolve against the workspace, which is also exec's
# working directory. When a turn ends in tool calls without text, OpenClaw makes a tool-less
# "produce the final user-visible answer now" request without a system prompt (a side turn in
# clawd). The `openclaw` tool delegates to a separate "openclaw" agent session (its own system
# prompt and tools, and a 51-token "Reply with the single word OK" inference probe first); its
# turns are recorded too, and a call's `agent` says whose it was.
#
# Smoke test (2026-12-01, this 2-core VM shared with a test suite, load 2-4; Qwen2.5-Coder-0.5B
# Q4_K_M, defaults above):
#   oracle, all 24 tasks: 24 passed, 28 calls, 0 malformed, 16 s a task (OpenClaw's start-up).
#   clawd, exec_echo: FAIL after 1,355 s, 23 model calls (1,328 s in clawd; the cold first prompt,
#     7,877 tokens, 93 s). The model called edit on a made-up logs/clawd/clawd.log twice (ENOENT),
#     then the `openclaw` tool 13 times (its agent looping on status), never exec; the answer
#     "Goodbye!" came from the tool-less recovery request. 15 calls, all of offered tools with
#     JSON arguments: malformed 0.
#   clawd, read_codeword: two tries, each ended by an outside SIGTERM before the answer. Both times
#     the first call was read with valid arguments ({"path": "note.txt", "optional": true}), its
#     result held the code word, and then the model delegated to the `openclaw` tool instead of
#     answering. The delegated agent twice wrote a call as text after a template token: one it
#     wrote out itself (`<|im_start|>`), one copied from its history, where OpenClaw had put a
#     zero-width space into it (`<\u200b|im_end|>`).
#     A new session's first turn evaluated 192 of its 7,872 prompt tokens (5.5 s).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "openclaw-tools: $*" >&2; }
# shellcheck source=scripts/openclaw-lib.sh
. "$ROOT/scripts/openclaw-lib.sh"
PORT=${CLAWD_TOOLS_PORT:-19751}
CTX=${CLAWD_TOOLS_CTX:-32768}
MAX_TOKENS=${CLAWD_TOOLS_MAX_TOKENS:-1024}
TIMEOUT=${CLAWD_TOOLS_TIMEOUT:-1800}
CAP_S=${CLAWD_TOOLS_CAP_S:-300}
MAX_CALLS=${CLAWD_TOOLS_MAX_CALLS:-8}
EXEC_MODE=${CLAWD_TOOLS_EXEC_MODE:-full}
JAIL=${CLAWD_TOOLS_JAIL:-auto}
TASKS=""
CONFIGS=clawd,nogrammar,llama
OUT=$ROOT/bench/results/tool_tasks.json
while [ $# -gt 0 ]; do
  case $1 in
    --tasks) TASKS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) oc_die "unknown argument $1 (see --help)" ;;
  esac
done
for c in ${CONFIGS//,/ }; do
  case $c in clawd | nogrammar | llama | oracle) ;; *) oc_die "unknown configuration $c (clawd, nogrammar, llama, oracle)" ;; esac
done

NAMES=$(cd "$ROOT" && "$PY" -m bench.tools.tasks list ${TASKS:+--tasks "$TASKS"}) || oc_die "--tasks $TASKS: see above"
oc_install
WORK=$(mktemp -d "${TMPDIR:-/tmp}/clawd-openclaw-tools.XXXXXX")
PIDS=()
STATUS=1
cleanup() {
  for p in "${PIDS[@]}"; do server_stop "$p"; done
  if [ "$STATUS" = 0 ] && [ "${CLAWD_TOOLS_KEEP:-0}" != 1 ]; then
    rm -rf "$WORK"
  else
    say "work directory kept: $WORK (*.log, *.json, home/)"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

OC_HOME=$WORK/home
WORKSPACE=$OC_HOME/.openclaw/workspace  # OpenClaw's default place for it, named so the bench knows it
if [ "$JAIL" = auto ]; then
  mkdir -p "$OC_HOME"
  oc_jail_works "$OC_HOME" && JAIL=1 || oc_die "cannot make the read-only jail here (unshare); CLAWD_TOOLS_JAIL=0 runs the model's commands without it"
fi
oc_write_wrapper "$WORK/openclaw" "$OC_HOME" "$JAIL"
# Every configuration shares this home, so OpenClaw's system prompt is the same for all of them.
EXTRA=$("$PY" -c 'import json,sys; print(json.dumps({"agents": {"defaults": {"workspace": sys.argv[1], "skipBootstrap": True}},
  "tools": {"fs": {"workspaceOnly": True}}}))' "$WORKSPACE")
MODEL=${CLAWD_TOOLS_MODEL:-$("$ROOT/scripts/qwen-model.sh")}
THREADS=$(nproc)
say "work directory $WORK; model $MODEL; configurations $CONFIGS; jail $JAIL; tasks $NAMES"

# backend LABEL: starts it, sets BASE and RECORD (--db FILE or --wire FILE) for the run.
backend() {
  local label=$1 base=http://127.0.0.1:$PORT
  case $label in
    clawd | nogrammar)
      # No judging or training between tasks: they would take the cores and could swap the model.
      local env=(CLAWD_AUTO_LEARN=0)
      [ "$label" = nogrammar ] && env+=(CLAWD_TOOL_GRAMMAR=0)
      clawd_start "$WORK/$label-home" "$PORT" "$MODEL" "$CTX" "$WORK/$label.log" "${env[@]}"
      PIDS+=("$SERVER_PID")
      RECORD=(--db "$WORK/$label-home/clawd.db") ;;
    llama)
      local up=$((PORT + 1))
      say "starting llama_cpp.server on :$up (log: $WORK/llama.log) behind the wire proxy on :$PORT"
      (cd "$WORK" && exec "$PY" -m llama_cpp.server --model "$MODEL" --chat_format chatml-function-calling \
        --n_ctx "$CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" --n_batch 512 \
        --host 127.0.0.1 --port "$up" >"$WORK/llama.log" 2>&1) &
      PIDS+=($!)
      server_wait "http://127.0.0.1:$up" "$!" "$WORK/llama.log" llama_cpp.server
      local whole=(--unstream)
      [ "${CLAWD_TOOLS_LLAMA_STREAM:-0}" = 1 ] && whole=()
      wire proxy --upstream "http://127.0.0.1:$up" "${whole[@]}" ;;
    oracle) wire oracle ;;
  esac
  BASE=$base
}
wire() {  # MODE [ARGS]: bench/tools/wire.py on $PORT, logging to $WORK/$label.wire.jsonl
  (cd "$ROOT" && exec "$PY" -m bench.tools.wire "$@" --port "$PORT" --log "$WORK/$label.wire.jsonl" \
    >"$WORK/$label-wire.log" 2>&1) &
  PIDS+=($!)
  server_wait "http://127.0.0.1:$PORT" "$!" "$WORK/$label-wire.log" bench.tools.wire
  RECORD=(--wire "$WORK/$label.wire.jsonl")
}

RESULTS=()
for label in ${CONFIGS//,/ }; do
  backend "$label"
  MODELS=$(http_get "$BASE/v1/models") || oc_die "$label does not answer $BASE/v1/models"
  MODEL_ID=$(echo "$MODELS" | json_get '["data"][0]["id"]')
  oc_write_config "$OC_HOME/.openclaw/openclaw.json" "$BASE" "$MODEL_ID" "$CTX" "$MAX_TOKENS" "$TIMEOUT" "$EXEC_MODE" "$EXTRA"
  timeout 300 "$WORK/openclaw" config validate >"$WORK/config-validate.txt" 2>&1 ||
    { cat "$WORK/config-validate.txt" >&2; oc_die "OpenClaw rejects the config"; }
  say "$label: model id '$MODEL_ID' at $BASE/v1"
  (cd "$ROOT" && "$PY" -m bench.tools.tasks run --label "$label" --openclaw "$WORK/openclaw" --workspace "$WORKSPACE" \
    "${RECORD[@]}" ${TASKS:+--tasks "$TASKS"} --cap-s "$CAP_S" --max-calls "$MAX_CALLS" --out "$WORK/$label.json")
  RESULTS+=("$WORK/$label.json")
  for p in "${PIDS[@]}"; do server_stop "$p"; done  # one backend at a time: they share the cores and the port
  PIDS=()
done

META=$("$PY" -c 'import json,os,sys; print(json.dumps({"openclaw": sys.argv[1], "node": sys.argv[2], "model": os.path.basename(sys.argv[3]),
  "ctx": int(sys.argv[4]), "max_tokens": int(sys.argv[5]), "exec_mode": sys.argv[6], "jail": sys.argv[7] == "1",
  "cores": os.cpu_count(), "load_average_end": os.getloadavg()}))' \
  "$OPENCLAW_VERSION" "$("$NODE_BIN/node" --version)" "$MODEL" "$CTX" "$MAX_TOKENS" "$EXEC_MODE" "$JAIL")
(cd "$ROOT" && "$PY" -m bench.tools.tasks summary "${RESULTS[@]}" --meta "$META" --out "$OUT")
STATUS=0
