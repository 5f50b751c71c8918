"""Render messages with the model's own chat template (the Jinja text stored in the GGUF).

Pure Python, no llama.cpp: the trainer renders teacher prompts with the very same code, so its
token ids match what the engine served. Templates that know tools (Qwen2.5, Hermes, Llama 3.1)
get them natively; for one that does not (SmolLM2's plain ChatML), tools are described in the
system message in the Hermes convention and calls are written as `<tool_call>{json}</tool_call>`,
the same syntax `tool_calls` parses back.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2 import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

# What clawd renders with when a GGUF carries no chat template (the engine and the trainer alike).
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # Same as Hugging Face's override: no HTML escaping, unicode kept (token ids depend on it).
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise TemplateError(message)


class TemplateError(ValueError):
    """The template refused the conversation (e.g. roles out of order)."""


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", control: tuple[str, ...] = ()):
        self.source = source
        self.control = control  # the text of the vocabulary's control tokens, defused in message text
        self.bos_token, self.eos_token = bos_token, eos_token
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=Undefined)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)
        self.native_tools = "tools" in source

    def spec(self) -> dict[str, Any]:
        """What makes this template, as plain data: ChatTemplate(**spec) builds it again (in the
        trainer child, which then need not load llama.cpp to read the GGUF's)."""
        return {"source": self.source, "bos_token": self.bos_token, "eos_token": self.eos_token,
                "control": self.control}

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, prefill: str = "") -> str:
        """Prompt text for `messages` (already normalized by serve: string content, no developer role)."""
        messages = self.prepare(messages, tools)
        kwargs: dict[str, Any] = {}
        if tools and self.native_tools:
            kwargs["tools"] = tools
        try:
            text = self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token, **kwargs,
            )
        except TemplateError:
            raise
        except Exception as e:  # a template bug or an input it cannot take: the caller answers 400
            raise TemplateError(f"the model's chat template failed on this conversation: {e}") from e
        return text + prefill

    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for m in messages:
            m = dict(m)
            if isinstance(m.get("content"), str):
                m["content"] = self.defuse(m["content"])
            calls = m.get("tool_calls") or []
            if self.native_tools:
                if calls:
                    # HF templates expect arguments as a mapping; OpenAI sends a JSON string.
                    m["tool_calls"] = [_call_with_mapping(c) for c in calls]
            else:
                if calls:
                    written = [
                        f"{TOOL_OPEN}\n{json.dumps({'name': c['function']['name'], 'arguments': call_arguments(c['function'].get('arguments'))}, ensure_ascii=False)}\n{TOOL_CLOSE}"
                        for c in calls
                    ]
                    m["content"] = "\n".join([m["content"], *written] if m.get("content") else written)
                    m.pop("tool_calls")
                if m["role"] == "tool":
                    m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
            out.append(m)
        if tools and not self.native_tools:
            out = _with_tool_system(out, tools)
        return merge_same_role(out)

    def defuse(self, text: str) -> str:
        """Break up control-token text (`<|im_end|>`) inside a message with a zero-width space: the
        prompt is tokenized with special tokens parsed (the template's own markers must be), so a
        user or a web page in a tool result could otherwise end its turn and open a system one."""
        for piece in self.control:
            if piece in text:
                text = text.replace(piece, piece[0] + "\u200b" + piece[1:])
        return text


def from_llama(llm: Any) -> tuple[ChatTemplate, int]:
    """The template a llama_cpp.Llama renders with (the GGUF's own, else ChatML, with its BOS/EOS
    text and control tokens), built one way for the engine and the trainer (which loads the
    vocabulary alone); and the most bytes any token spells (`vocab_pieces`)."""
    def piece(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    control, longest = vocab_pieces(llm)
    template = ChatTemplate(llm.metadata.get("tokenizer.chat_template") or CHATML, bos_token=piece(llm.token_bos()),
                            eos_token=piece(llm.token_eos()), control=control)
    return template, longest


def vocab_pieces(llm: Any) -> tuple[tuple[str, ...], int]:
    """One walk over a llama_cpp.Llama's vocabulary: (the text of every control token, longest
    first; the most bytes any token spells, control tokens included, as prompts are tokenized
    with special tokens parsed)."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    control, longest = set(), 1
    for t in range(llm.n_vocab()):
        piece = llm.detokenize([t], special=True)
        longest = max(longest, len(piece))
        if llama_cpp.llama_vocab_get_attr(vocab, t) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
            control.add(piece.decode("utf-8", "replace"))
    return tuple(sorted((p for p in control if len(p) > 1), key=len, reverse=True)), longest


def normalize(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as JSON (validated by serve, or recorded) → plain dicts every chat template
    can take: developer → system, list content joined, null → "", tool messages named after the
    call they answer. Serve renders with it and the trainer re-renders recorded requests with it."""
    calls: dict[str, str] = {}
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text") or "" for p in content)
        msg: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"], "content": content or ""}
        if m.get("tool_calls"):
            msg["tool_calls"] = []
            for c in m["tool_calls"]:
                args = c["function"].get("arguments", "{}")
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                calls[c["id"]] = c["function"]["name"]
                msg["tool_calls"].append({"id": c["id"], "type": "function",
                                          "function": {"name": c["function"]["name"], "arguments": args}})
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
            msg["name"] = m.get("name") or calls.get(m.get("tool_call_id") or "", "")
        elif m.get("name"):
            msg["name"] = m["name"]
        out.append(msg)
    return out


def call_arguments(args: Any) -> Any:
    """A call's arguments as data: a client may send the JSON text or the object, or none ({})."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args if args is not None else {}


def _call_with_mapping(call: dict[str, Any]) -> dict[str, Any]:
    fn = dict(call["function"])
    fn["arguments"] = call_arguments(fn.get("arguments"))
    return {**call, "function": fn}


def _with_tool_system(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    block = (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{TOOL_OPEN}{TOOL_CLOSE} XML tags:\n{TOOL_OPEN}\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n' + TOOL_CLOSE
    )
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{block}"
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def merge_same_role(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive system/user/assistant messages (many templates demand alternation).

    Tool messages and assistant messages carrying tool calls are kept apart: templates that know
    tools group consecutive results themselves, and a call must stay attached to its message.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        prev = out[-1] if out else None
        if (prev is not None and prev["role"] == m["role"] and m["role"] in ("system", "user", "assistant")
                and not prev.get("tool_calls") and not m.get("tool_calls")):
            joined = "\n\n".join(p for p in (prev.get("content") or "", m.get("content") or "") if p)
            out[-1] = {**prev, "content": joined}
        else:
            out.append(m)
    return out
