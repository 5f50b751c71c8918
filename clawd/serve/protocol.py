"""OpenAI chat-completions request types, validation and normalization, and the error shape.

Everything a client may get wrong is caught here and answered with OpenAI's error body and a
4xx status, before anything is recorded or the model is touched.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..engine.chat_template import normalize

MAX_TOKENS_LIMIT = 1_000_000
# A stop sequence is looked for after every token, and a partial one at the answer's end costs
# its length squared: a 1 MB stop would make each token cost seconds. OpenAI documents no bound.
MAX_STOP_CHARS = 256
# A tool's parameters deeper than this are refused before anything walks them recursively (the
# template's JSON, the grammar's converter); OpenClaw's deepest schema nests 5 levels.
MAX_SCHEMA_DEPTH = 64
MAX_TOP_LOGPROBS = 20  # OpenAI's own bound on top_logprobs


class ApiError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDef


class NamedChoice(BaseModel):
    class _Fn(BaseModel):
        name: str

    type: Literal["function"]
    function: _Fn


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # clients send fields we do not use (store, metadata, ...)
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedChoice | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = Field(None, ge=1, le=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if isinstance(v, list) and (len(v) > 4 or any(not s for s in v)):
            raise ValueError("stop takes at most 4 non-empty strings")
        if any(len(s) > MAX_STOP_CHARS for s in ([v] if isinstance(v, str) else v or [])):
            raise ValueError(f"a stop sequence may be at most {MAX_STOP_CHARS} characters")
        return v


def logprob_entry(piece: bytes, logprob: float, top: list[tuple[bytes, float]]) -> dict[str, Any]:
    """One token of `choices[].logprobs.content`, as OpenAI writes it: its text, logprob (at
    temperature 1: the model's own distribution, renormalized under a tool-call grammar), bytes,
    and the likeliest tokens at that step."""
    def one(b: bytes, lp: float) -> dict[str, Any]:
        return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}

    return one(piece, logprob) | {"top_logprobs": [one(b, lp) for b, lp in top]}


def parse_request(raw: bytes) -> ChatRequest:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError(400, f"We could not parse the JSON body of your request: {e}") from None
    except RecursionError:
        raise ApiError(400, "The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    try:
        req = ChatRequest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"])
        raise ApiError(400, f"Invalid value for '{param}': {err['msg']}", param=param) from None
    except RecursionError:
        raise ApiError(400, "The request body is nested too deeply.") from None
    if req.top_logprobs and not req.logprobs:
        raise ApiError(400, "Invalid value for 'top_logprobs': logprobs must be true when top_logprobs is set.",
                       param="top_logprobs")
    return req


def _text(content: str | list[TextPart] | None, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for i, p in enumerate(content):
        if p.type != "text" or p.text is None:
            raise ApiError(400, f"Unsupported content part type '{p.type}' in {where}: this model reads text only.",
                           param=f"{where}.content.{i}.type")
        parts.append(p.text)
    return "\n".join(parts)


def normalize_messages(req: ChatRequest) -> list[dict[str, Any]]:
    """Check what a template cannot take (non-text parts, tool calls outside assistant messages,
    a tool result that answers no earlier call), then normalize as the trainer will
    (`chat_template.normalize`)."""
    called: set[str] = set()
    for i, m in enumerate(req.messages):
        where = f"messages.{i}"
        if m.content is None and m.role != "assistant":  # only an assistant message may be content-less (tool calls)
            raise ApiError(400, f"Invalid value for '{where}.content': expected a string or an array of content "
                           f"parts, got null. A {m.role} message needs content.", param=f"{where}.content")
        _text(m.content, where)
        if m.tool_calls:
            if m.role != "assistant":
                raise ApiError(400, f"Only assistant messages can carry tool_calls ({where}).", param=f"{where}.tool_calls")
            called.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            if not m.tool_call_id:
                raise ApiError(400, f"A tool message needs a tool_call_id ({where}).", param=f"{where}.tool_call_id")
            if m.tool_call_id not in called:
                raise ApiError(400, f"Invalid parameter: tool message {where} answers tool_call_id '{m.tool_call_id}', "
                               "which no preceding assistant message called.", param=f"{where}.tool_call_id")
    return normalize([m.model_dump(exclude_none=True) for m in req.messages])


def tools_of(req: ChatRequest, max_tools: int) -> list[dict[str, Any]]:
    """The offered tools as dicts, refused before any work grows with them: more than `max_tools`,
    duplicate names, parameters nested deeper than MAX_SCHEMA_DEPTH."""
    if not req.tools:
        return []
    if len(req.tools) > max_tools:
        raise ApiError(400, f"Invalid 'tools': {len(req.tools)} tools were offered; at most {max_tools} may be "
                       "(setting max_tools).", param="tools", code="too_many_tools")
    names = [t.function.name for t in req.tools]
    if len(set(names)) != len(names):
        raise ApiError(400, "Tool names must be unique.", param="tools")
    for i, t in enumerate(req.tools):
        if t.function.parameters is not None and _depth(t.function.parameters) > MAX_SCHEMA_DEPTH:
            raise ApiError(400, f"Invalid 'tools.{i}.function.parameters': nested deeper than {MAX_SCHEMA_DEPTH} "
                           "levels.", param=f"tools.{i}.function.parameters", code="schema_too_deep")
    return [t.model_dump(exclude_none=True) for t in req.tools]


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, walked without recursion (a dict or list counts one level)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        deepest = max(deepest, d)
        if deepest > MAX_SCHEMA_DEPTH:
            break
        todo.extend((c, d + 1) for c in children)
    return deepest


def max_tokens_of(req: ChatRequest, default: int) -> int:
    return req.max_completion_tokens or req.max_tokens or default


def context_error(n_ctx: int, n_prompt: int, n_completion: int, at_least: bool = False) -> ApiError:
    """`at_least`: `n_prompt` is a lower bound (the prompt was too long to be worth tokenizing)."""
    # OpenClaw compacts and retries only when it sees this wording.
    some = "at least " if at_least else ""
    return ApiError(
        400,
        f"This model's maximum context length is {n_ctx} tokens. However, you requested {some}"
        f"{n_prompt + n_completion} tokens ({some}{n_prompt} in the messages, {n_completion} in the completion). "
        "Please reduce the length of the messages or completion.",
        param="messages", code="context_length_exceeded",
    )


class FeedbackRequest(BaseModel):
    """POST /v1/feedback's body (checked by the route itself, to name the bad parameter)."""

    id: str = Field(description="The completion id (chatcmpl-…) the feedback is about.")
    score: Literal[1, -1]
    comment: str | None = Field(None, description="Why; it becomes the turn's OPD hint unless it quotes a tool's result.")


class AdapterRequest(BaseModel):
    """POST /v1/clawd/adapters/{action}'s body: `use` and (optionally) `publish` name a version."""

    version: int | None = None
