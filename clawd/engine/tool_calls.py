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

from ..store.records import ToolCall
from .chat_template import TOOL_CLOSE, TOOL_OPEN

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
    found = _as_calls(_load(_HEADED.sub("", text, count=1)), offered)
    if found:
        return "", found
    for m in _FENCE.finditer(text):
        found = _as_calls(_load(m.group(1)), offered)
        if found:
            return (text[: m.start()] + text[m.end():]).strip(), found
    return text, []


def hold_from(text: str) -> int:
    """Index from which a streaming response must hold text back because it may be a call.

    A reply that opens with `{` or `[` may be a bare JSON call: hold all of it (also after a turn
    header the model wrote, `<|im_start|>`). Otherwise hold from the first marker, or from a
    trailing partial marker (`<tool_` may become `<tool_call>`).
    """
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") or stripped.startswith(_IM_START):
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


# json_schema_to_gbnf allows one optional space between tokens. A model that began a call by
# itself may have pretty-printed it, so a lazy grammar takes a newline and an indent there too
# (the trigger patterns spell the same); a forced call stays compact (fewer tokens).
_SPACE_RULE = r'space ::= ( " " | "\n" [ \t]{0,20} )?'
# its string characters include raw newlines and control characters, which JSON forbids
_CHAR_RULE = r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_SPACE = rb"(?: |\n[ \t]{0,20})?"
# A turn header the model wrote itself before the call (its template's `<|im_start|>` token,
# perhaps with a role): Qwen2.5-0.5B did so under OpenClaw, opening a new message of its own.
_IM_START = "<|im_start|>"
_HEADER = f"(?:{re.escape(_IM_START)}(?:assistant)?\\s*)?"
_BARE = re.compile(rb"\s*" + _HEADER.encode() + rb"(\{)" + _SPACE + rb'"name"')  # a JSON call opening the answer
_HEADED = re.compile(r"^\s*" + _HEADER)
_FENCED = re.compile(rb"```[a-zA-Z]*\n[ \t]*\{" + _SPACE + rb'"name"')  # a fenced one, anywhere
_FORMS = (f'clawd-tagged ::= clawd-one ( [ \\n]{{0,2}} clawd-one )*\n'
          f'clawd-one ::= {json.dumps(TOOL_OPEN)} [ \\n]{{0,2}} clawd-call [ \\n]{{0,2}} {json.dumps(TOOL_CLOSE)}\n'
          'clawd-fenced ::= "```" [a-zA-Z]{0,16} "\\n" [ \\t]{0,20} clawd-call [ \\n]{0,2} "```"\n')


# What a tool grammar may cost. llama.cpp's converter writes a length or item bound out in full
# (`maxLength: 100000` is 0.8 MB of grammar from a 30-byte schema), so a bound above MAX_REPEAT
# is dropped: the argument stays JSON of its type, of any length (OpenClaw's largest is 512). The
# grammar as a whole may take MAX_GRAMMAR_BYTES: 4x what 128 of OpenClaw's tools need (0.24 MB).
# 512 of them make 0.97 MB, built in 0.12 s and parsed by llama.cpp in 0.06 s, and a masked step
# at the tool name then takes 0.3 s against 0.05 s for 12 (Qwen2.5-Coder-0.5B, 2 threads,
# bench/results/tool_limits.json).
MAX_REPEAT = 4096
MAX_GRAMMAR_BYTES = 1 << 20
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


class ToolGrammarError(ValueError):
    """The offered tools make a grammar larger than MAX_GRAMMAR_BYTES."""


def _bounded(schema: Any) -> Any:
    """A copy of a JSON schema without the repetition bounds (and patterns with quantifiers) over
    MAX_REPEAT: what would make llama.cpp's converter write a grammar of that size."""
    if isinstance(schema, list):
        return [_bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in _BOUNDS and isinstance(v, int) and v > MAX_REPEAT:
            continue
        if k == "pattern" and isinstance(v, str) and any(int(n or 0) > MAX_REPEAT for m in _QUANTIFIER.findall(v)
                                                         for n in m):
            continue
        out[k] = _bounded(v)
    return out


def _call_rules(tools: list[dict[str, Any]], name: str | None, pretty: bool) -> str:
    """GBNF rules defining `clawd-call`: `{"name": ..., "arguments": ...}` for one offered tool
    (`name`) or any of them, the arguments under the tool's JSON schema (required keys, types).
    Schemas llama.cpp's converter cannot take fall back to any JSON object. `pretty`: a newline
    and an indent may stand where a space may. Raises ToolGrammarError past MAX_GRAMMAR_BYTES."""
    chosen = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    alts, size = [], 0
    for fn in chosen:
        schema: dict[str, Any] = {"type": "object", "properties": {"name": {"const": fn["name"]}},
                                  "required": ["name", "arguments"]}
        try:
            schema["properties"]["arguments"] = _bounded(fn.get("parameters") or {"type": "object"})
            size += len(json_schema_to_gbnf(json.dumps(schema), prop_order=["name", "arguments"]))
        except Exception:
            schema["properties"]["arguments"] = {"type": "object"}
        if size > MAX_GRAMMAR_BYTES:
            raise ToolGrammarError(f"the offered tools' schemas make a tool-call grammar of more than "
                                   f"{MAX_GRAMMAR_BYTES} bytes, the most clawd builds; offer fewer or smaller schemas")
        alts.append(schema)
    top = alts[0] if len(alts) == 1 else {"anyOf": alts}
    body = json_schema_to_gbnf(json.dumps(top), prop_order=["name", "arguments"])
    body = re.sub(r"^root ::=", "clawd-call ::=", body, flags=re.M)
    body = re.sub(r"^char ::= .*$", lambda _: _CHAR_RULE, body, flags=re.M)
    return re.sub(r"^space ::= .*$", lambda _: _SPACE_RULE, body, flags=re.M) if pretty else body


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    esc = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return '"' + "".join(esc.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in text) + '"'


def forced_call_grammar(tools: list[dict[str, Any]], name: str | None) -> str:
    """GBNF for `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`: one offered tool
    (`name`), or any of them (`tool_choice: required`)."""
    open_, close = json.dumps(TOOL_OPEN + "\n"), json.dumps("\n" + TOOL_CLOSE)
    return f"root ::= {open_} clawd-call {close}\n{_call_rules(tools, name, pretty=False)}"


class CallTrigger:
    """`tool_choice: auto`: the answer is free text until it begins a tool call, then the rest of
    it is decoded under a grammar of the offered tools (engine.Sampling.lazy). A call begins at
    `<tool_call>` anywhere, at a `{"name"` object that opens the answer, or at a ```-fenced one.
    From there the name must be an offered tool and the arguments its schema's JSON, so the
    model that meant to write `"execute"` when `exec` is offered writes `exec`. The key `"name"`
    is where it triggers (llama.cpp's server waits for a whole offered name, which never comes
    when the model reaches for an unoffered one); a bare call then ends the answer."""

    def __init__(self, tools: list[dict[str, Any]]):
        self._rules = _call_rules(tools, None, pretty=True)
        self.fired_at: int | None = None  # byte offset in the answer where the call began

    @staticmethod
    def start(text: bytes) -> tuple[int, str] | None:
        """(byte offset, GBNF rule of the form) of the first call begun in `text`, if any."""
        found = []
        if (i := text.find(TOOL_OPEN.encode())) >= 0:
            found.append((i, "clawd-tagged"))
        if m := _BARE.match(text):
            found.append((m.start(1), "clawd-call"))
        if m := _FENCED.search(text):
            found.append((m.start(), "clawd-fenced"))
        return min(found) if found else None

    def __call__(self, text: bytes) -> str | None:
        if self.fired_at is not None or (found := self.start(text)) is None:
            return None
        at, form = found
        try:
            prefix = text[:at].decode("utf-8")
        except UnicodeDecodeError:  # the model wrote bytes that are not text: leave the answer free
            return None
        self.fired_at = at
        lead = gbnf_literal(prefix) + " " if prefix else ""
        return f"root ::= {lead}{form}\n{_FORMS}{self._rules}"
