"""OPD hints from evidence (design §6): what the teacher reads to know how a reply should have been.

A small judge that has to *write* a hint almost never does (1 hint in 24 turns on
Qwen2.5-0.5B with sampled hint votes), and a hint lost to a broken format teaches nothing. So a
hint is built from the evidence itself: the user's own correction, quoted; the failed tool call,
named; or the comment the user gave with explicit feedback. The base model reading that evidence
does the work of distillation (OPD only re-weights the student's own tokens).

A hint never carries a tool's output: the teacher would see the future (what the tool returned),
and OPD would reward tokens that guess it (the reference implementation's rule too).
On the store's floor (it imports only records), so the judge and the feedback route share it
without one stage importing another.
"""

from __future__ import annotations

import re
from typing import Any

from .records import NextState, Turn

MAX_QUOTE = 300  # characters of the user's correction or comment a hint quotes
NULL_QUOTE = "That's not right."  # a complaint that says nothing of what was wrong (`null_hint`)
QUOTE_WORDS = 4  # a run of this many words shared with a tool result is a quote of it

_WORD = re.compile(r"\w+", re.U)


def text_of(content: Any) -> str:
    """A message's text: OpenAI content is a string, a list of parts, or null."""
    if isinstance(content, list):
        return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content or ""


def clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def quotes_tool_output(hint: str, tool_texts: list[str]) -> bool:
    """True if `hint` shares a run of QUOTE_WORDS words with any tool result (or, for a result
    shorter than that, contains all of it)."""
    h = _words(hint)
    grams = {tuple(h[i:i + QUOTE_WORDS]) for i in range(len(h) - QUOTE_WORDS + 1)}
    joined = " ".join(h)
    for text in tool_texts:
        t = _words(text)
        if not t:
            continue
        if len(t) < QUOTE_WORDS:
            if re.search(rf"\b{re.escape(' '.join(t))}\b", joined):
                return True
            continue
        if any(tuple(t[i:i + QUOTE_WORDS]) in grams for i in range(len(t) - QUOTE_WORDS + 1)):
            return True
    return False


def tool_texts(turn: Turn | None, ns: NextState | None) -> list[str]:
    """Every tool result the hint must not quote: those after the turn (the future) and those in
    its own request."""
    msgs = (list(turn.request.get("messages", [])) if turn is not None else []) + (ns.messages if ns else [])
    return [text_of(m.get("content")) for m in msgs if m.get("role") == "tool"]


def evidence_hint(turn: Turn, ns: NextState, score: int) -> str | None:
    """The hint for a turn the judge scored -1, from what came next; None for any other verdict."""
    if score != -1:
        return None
    if ns.role == "user":
        said = next((text_of(m.get("content")) for m in reversed(ns.messages) if m.get("role") == "user"), "")
        if not said.strip():
            return None
        hint = (f'The user answered this reply with: "{clip(said, MAX_QUOTE)}". '
                "Write the reply so that this answer would not have been needed.")
    else:
        # Name the call, never its result: the result is the future.
        calls = ", ".join(f"{c.name}({clip(c.arguments, 120)})" for c in turn.tool_calls) or "the tool call"
        hint = (f"The tool call {calls} made in this reply failed. Choose the tool and its arguments "
                "carefully (names, paths, commands) so that the call succeeds.")
    return None if quotes_tool_output(hint, tool_texts(turn, ns)) else hint


def feedback_hint(comment: str | None, turn: Turn | None, ns: NextState | None) -> tuple[str | None, str | None]:
    """(hint, why not) for a feedback comment: the comment itself, unless it is empty or quotes a
    tool's result."""
    if comment is None or not comment.strip():
        return None, None
    if quotes_tool_output(comment, tool_texts(turn, ns)):
        return None, "the comment quotes a tool's result, which the teacher must not see"
    return f'The user said about this reply: "{clip(comment, MAX_QUOTE)}"', None


def null_hint(hint: str) -> str | None:
    """The same hint with the user's quoted words replaced by a complaint that names nothing
    (NULL_QUOTE); None for a hint that quotes nothing (a failed tool call's).

    What the teacher does on reading it is its reaction to being corrected at all: on
    Qwen2.5-Coder-0.5B, a terse answer whatever the complaint was, which OPD turned into "shorter"
    for a user who never asked for it (docs/learning.md, the control user). `opd_contrast`
    compares the teacher with the real hint to the teacher with this one, so only what the user's
    own words add is distilled."""
    first, last = hint.find('"'), hint.rfind('"')
    if first < 0 or last <= first:
        return None
    return f'{hint[:first]}"{NULL_QUOTE}"{hint[last + 1:]}'
