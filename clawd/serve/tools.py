"""Tool calls: parse what models really write, hold back text that may become a call while
streaming, and build the grammar that forces a well-formed call.

Accepted forms (only when tools were offered):
  <tool_call>{"name": ..., "arguments": {...}}</tool_call>   Hermes / Qwen templates (and clawd's
                                                              own fallback for templates without tools)
  a bare or ```-fenced {"name": ..., "arguments": ...} object  what Qwen2.5-0.5B actually answers
  a list of such objects
An object counts only if it names an offered tool; anything else stays plain text.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from llama_cpp.llama_grammar import json_schema_to_gbnf

from ..chat_template import TOOL_CLOSE, TOOL_OPEN
from ..records import ToolCall

_TAGGED = re.compile(re.escape(TOOL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CLOSE) + r"|$)", re.S)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.S)
# Where text may turn into a call: from here on a stream holds output back until the end.
_MARKERS = (TOOL_OPEN, "```")


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _as_calls(obj: Any, offered: set[str]) -> list[ToolCall] | None:
    items = obj if isinstance(obj, list) else [obj]
    calls = []
    for it in items:
        if not isinstance(it, dict) or it.get("name") not in offered:
            return None
        args = it.get("arguments", it.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append(ToolCall(new_call_id(), it["name"], json.dumps(args, ensure_ascii=False)))
    return calls or None


def _load(text: str) -> Any:
    try:
        return json.loads(text.strip())
    except ValueError:
        return None


def parse_tool_calls(text: str, offered: set[str]) -> tuple[str, list[ToolCall]]:
    """Split a finished completion into (content, tool calls)."""
    if not offered:
        return text, []
    if TOOL_OPEN in text:
        calls: list[ToolCall] = []
        for body in _TAGGED.findall(text):
            found = _as_calls(_load(body), offered)
            if found is None:
                return text, []  # a malformed call stays visible as text rather than vanish
            calls += found
        return _TAGGED.sub("", text).strip(), calls
    found = _as_calls(_load(text), offered)
    if found:
        return "", found
    for m in _FENCE.finditer(text):
        found = _as_calls(_load(m.group(1)), offered)
        if found:
            return (text[: m.start()] + text[m.end():]).strip(), found
    return text, []


def hold_from(text: str) -> int:
    """Index from which a streaming response must hold text back because it may be a call.

    A reply that opens with `{` or `[` may be a bare JSON call: hold all of it. Otherwise hold
    from the first marker, or from a trailing partial marker (`<tool_` may become `<tool_call>`).
    """
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return 0
    first = min((i for i in (text.find(m) for m in _MARKERS) if i >= 0), default=-1)
    if first >= 0:
        return first
    return len(text) - partial_suffix(text, _MARKERS)


def partial_suffix(text: str, needles: tuple[str, ...] | list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `needles`."""
    best = 0
    for n in needles:
        for k in range(min(len(n) - 1, len(text)), best, -1):
            if text.endswith(n[:k]):
                best = k
                break
    return best


def forced_call_grammar(tools: list[dict[str, Any]], name: str | None) -> str:
    """GBNF for `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`: one offered tool
    (`name`), or any of them (`tool_choice: required`). Argument schemas llama.cpp's converter
    cannot take fall back to any JSON object."""
    chosen = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    alts = []
    for fn in chosen:
        params = fn.get("parameters") or {"type": "object"}
        schema: dict[str, Any] = {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
                  "required": ["name", "arguments"]}
        try:
            json_schema_to_gbnf(json.dumps(schema), prop_order=["name", "arguments"])
        except Exception:
            schema["properties"]["arguments"] = {"type": "object"}
        alts.append(schema)
    top = alts[0] if len(alts) == 1 else {"anyOf": alts}
    body = json_schema_to_gbnf(json.dumps(top), prop_order=["name", "arguments"])
    body = re.sub(r"^root ::=", "clawd-call ::=", body, flags=re.M)
    open_, close = json.dumps(TOOL_OPEN + "\n"), json.dumps("\n" + TOOL_CLOSE)
    return f"root ::= {open_} clawd-call {close}\n{body}"
