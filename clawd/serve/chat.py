"""One chat completion from request to recorded turn.

`prepare` validates, renders, tokenizes and checks the context (every failure a 4xx before
anything is written), then links the session and records the turn as 'running'. `run`
generates in a worker thread, emitting content and tool-call events as they become safe to
send, and writes the finished turn before it emits `done`: nothing a client was answered is
missing from the database.
"""

from __future__ import annotations

import codecs
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..engine import tool_calls
from ..engine.chat_template import TemplateError
from ..engine.engine import Engine, GenInfo, Sampling
from ..store.records import DEFAULT_TEMPERATURE, ToolCall, Turn
from ..store.store import StorageError, Store
from . import protocol, sessions

log = logging.getLogger("clawd.serve")


@dataclass
class Event:
    kind: str  # "content" | "tool_calls" | "done" | "error"
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish: str | None = None
    usage: dict[str, Any] | None = None
    status: int = 500  # of an error: 503 when the turn could not be recorded (retry once there is room)
    logprobs: list[dict[str, Any]] | None = None  # with logprobs asked: the tokens since the last event that carried any


@dataclass
class Prepared:
    turn: Turn
    sampling: Sampling
    stops: list[str]
    offered: set[str]  # tool names whose calls are parsed out of the text
    forced: bool  # tool_choice required / named: the grammar makes the whole answer a call
    created: int
    close_session: bool
    logprobs: bool = False  # the client asked for each token's logprob (and sampling.top_logprobs alternatives)


class ChatService:
    def __init__(self, engine: Engine, store: Store, settings: Settings):
        self.engine, self.store, self.settings = engine, store, settings
        self.in_flight = 0  # admitted requests, generating or waiting for the engine (idle detection reads it)
        self.last_activity = time.time()
        self._count_lock = threading.Lock()
        # Called as each request is admitted, before it waits for the engine: the daemon pauses a
        # training child here so that at most the micro-step under way stands between a user and the CPU.
        self.on_admit: Callable[[], None] = lambda: None

    def admit(self) -> bool:
        """Take a place in the bounded queue; False when it is full (the client gets 503 + Retry-After)."""
        with self._count_lock:
            if self.in_flight > self.settings.max_queue:
                return False
            self.in_flight += 1
            self.last_activity = time.time()
        self.on_admit()
        return True

    def release(self) -> None:
        with self._count_lock:
            self.in_flight -= 1
            self.last_activity = time.time()

    def prepare(self, req: protocol.ChatRequest, headers: dict[str, str]) -> Prepared:
        messages = protocol.normalize_messages(req)
        tool_list = protocol.tools_of(req, self.settings.max_tools)
        choice = req.tool_choice or ("auto" if tool_list else "none")
        named = choice.function.name if isinstance(choice, protocol.NamedChoice) else None
        if choice == "required" or named is not None:
            if not tool_list:
                raise protocol.ApiError(400, "tool_choice requires tools.", param="tool_choice")
            if named is not None and named not in {t["function"]["name"] for t in tool_list}:
                raise protocol.ApiError(400, f"tool_choice names '{named}', which is not among the tools.", param="tool_choice")
        use_tools = tool_list if choice != "none" else []
        forced = bool(use_tools) and (choice == "required" or named is not None)
        try:
            prompt_text = self.engine.template.render(messages, use_tools or None)
        except TemplateError as e:
            raise protocol.ApiError(400, str(e), param="messages") from None
        max_tokens = protocol.max_tokens_of(req, self.settings.default_max_tokens)
        n_ctx, n_bytes = self.engine.n_ctx, len(prompt_text.encode("utf-8"))
        if n_bytes > n_ctx * self.engine.max_token_bytes:  # cannot fit, whatever it tokenizes to
            raise protocol.context_error(n_ctx, -(-n_bytes // self.engine.max_token_bytes), max_tokens, at_least=True)
        prompt = self.engine.tokenize(prompt_text)
        if len(prompt) >= n_ctx:
            raise protocol.context_error(n_ctx, len(prompt), max_tokens)
        try:  # built only for a prompt that fits, and bounded (tool_calls.MAX_GRAMMAR_BYTES)
            grammar = tool_calls.forced_call_grammar(use_tools, named) if forced else None
            lazy = tool_calls.CallTrigger(use_tools) if use_tools and not forced and self.settings.tool_grammar else None
        except tool_calls.ToolGrammarError as e:
            raise protocol.ApiError(400, f"Invalid 'tools': {e}.", param="tools", code="tool_grammar_too_large") from None
        sampling = Sampling(
            temperature=DEFAULT_TEMPERATURE if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed, max_tokens=max_tokens, grammar=grammar, lazy=lazy, top_logprobs=req.top_logprobs or 0,
        )
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])

        kind = sessions.classify(messages, bool(tool_list), headers.get("x-turn-type"))
        link = sessions.link(self.store, messages, kind, sessions.session_key(headers))
        if link.next_state is not None and self.store.add_next_state(link.next_state):
            log.info("turn %d got its next state (%s)", link.next_state.turn_id, link.next_state.role)
        turn = Turn(
            session_id=link.session_id, index=self.store.next_index(link.session_id), kind=link.kind,
            completion_id="chatcmpl-" + secrets.token_hex(12),
            request={"messages": [m.model_dump(exclude_none=True) for m in req.messages],
                     "tools": tool_list, "tool_choice": choice if isinstance(choice, str) else choice.model_dump(),
                     "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": req.seed,
                     "max_tokens": max_tokens, "stop": stops, "stream": req.stream},
            prompt_ids=prompt, adapter_version=getattr(self.engine, "adapter_version", None),
        )
        self.store.insert_turn(turn)
        log.info("turn %d (session %d, #%d, %s): %d prompt tokens", turn.id, turn.session_id, turn.index, turn.kind, len(prompt))
        return Prepared(turn, sampling, stops, {t["function"]["name"] for t in use_tools}, forced,
                        int(time.time()), headers.get("x-session-done", "").lower() in ("1", "true", "yes"),
                        bool(req.logprobs))

    def run(self, p: Prepared, emit: Callable[[Event], None], cancel: threading.Event) -> Turn:
        """Generate, emit, record. Blocking: call it in a worker thread. Releases the admission."""
        try:
            return self._run(p, emit, cancel)
        finally:
            self.release()

    def _run(self, p: Prepared, emit: Callable[[Event], None], cancel: threading.Event) -> Turn:
        turn, info = p.turn, GenInfo()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text, sent = "", 0
        stop_hit = False
        t_queued = time.perf_counter()
        t_first = None
        entries: list[dict[str, Any]] = []  # logprobs not yet sent, when asked for

        def unsent() -> list[dict[str, Any]] | None:
            if not p.logprobs:
                return None
            out = entries[:]
            entries.clear()
            return out

        try:
            with self.engine.lock.user():
                t_start = time.perf_counter()
                # the adapter can change while a request waits (a swap queues on this lock): record
                # the one that actually produces the answer
                turn.adapter_version = getattr(self.engine, "adapter_version", None)
                gen = self.engine.generate(turn.prompt_ids, p.sampling, info, cancel)
                try:
                    for step in gen:
                        if t_first is None:
                            t_first = time.perf_counter()
                        turn.completion_ids.append(step.token)
                        turn.logprobs.append(step.logprob)
                        if p.logprobs:
                            entries.append(protocol.logprob_entry(
                                step.piece, step.logprob, [(self.engine.piece(t), lp) for t, lp in step.top]))
                        text += decoder.decode(step.piece)
                        if p.stops:
                            cut = min((i for i in (text.find(s, max(0, sent - len(s))) for s in p.stops) if i >= 0), default=-1)
                            if cut >= 0:
                                text, stop_hit = text[:cut], True
                        safe = len(text)
                        if p.stops and not stop_hit:
                            safe -= tool_calls.partial_suffix(text, p.stops)
                        if p.forced:
                            safe = 0
                        elif p.offered:
                            safe = min(safe, tool_calls.hold_from(text))
                        if safe > sent:
                            emit(Event("content", text=text[sent:safe], logprobs=unsent()))
                            sent = safe
                        if stop_hit or cancel.is_set():
                            break
                finally:
                    gen.close()
                if info.eog is not None and not stop_hit:
                    turn.completion_ids.append(info.eog.token)
                    turn.logprobs.append(info.eog.logprob)
            if not stop_hit:
                text += decoder.decode(b"", final=True)
            content, calls = tool_calls.parse_tool_calls(text, p.offered)
            if calls:
                turn.finish_reason = "tool_calls"
            else:
                content = text
                turn.finish_reason = "stop" if stop_hit else info.finish
            if len(content) > sent:
                emit(Event("content", text=content[sent:], logprobs=unsent()))
            turn.text, turn.tool_calls = content, calls
            turn.status = "aborted" if cancel.is_set() else "ok"
        except Exception as e:  # the engine failed mid-answer: record it, tell the client, keep serving
            log.exception("generation failed for turn %s", turn.id)
            turn.text, turn.status, turn.finish_reason = text, "error", "error"
            try:
                self._record(turn, info, t_queued, t_start if "t_start" in locals() else None, t_first, p)
            except StorageError as err:
                log.error("turn %d: %s", turn.id, err)
            emit(Event("error", text=f"generation failed: {e}"))
            return turn
        try:
            self._record(turn, info, t_queued, t_start, t_first, p)
        except StorageError as e:
            # The answer exists but could not be recorded: the client gets an error rather than an
            # answer the database lacks (the row stays 'running' and is marked aborted at the next start).
            log.error("turn %d not recorded, answer withheld: %s", turn.id, e)
            emit(Event("error", text=str(e), status=503))
            return turn
        if calls:
            emit(Event("tool_calls", calls=calls))
        emit(Event("done", finish=turn.finish_reason, usage=self.usage(turn, info), logprobs=unsent()))
        return turn

    def _record(self, turn: Turn, info: GenInfo, t_queued: float, t_start: float | None, t_first: float | None,
                p: Prepared) -> None:
        end = time.perf_counter()
        start = t_start or end
        turn.timings = {
            "queued_s": round(start - t_queued, 4),
            "first_token_s": round((t_first or end) - start, 4),
            "total_s": round(end - start, 4),
            "prompt_tokens": info.n_prompt, "cached_tokens": info.n_cached, "cached_from": info.cache,
            "evaluated_prompt_tokens": info.n_prompt - info.n_cached if info.n_evaluated is None else info.n_evaluated,
            "completion_tokens": len(turn.completion_ids),
        }
        if t_first and len(turn.completion_ids) > 1:
            turn.timings["tokens_per_s"] = round((len(turn.completion_ids) - 1) / max(end - t_first, 1e-9), 2)
        self.store.finish_turn(turn)
        self.store.touch_session(turn.session_id, closed=p.close_session)
        log.info("turn %d %s: %d tokens, %s, %.2fs", turn.id, turn.status, len(turn.completion_ids),
                 turn.finish_reason, turn.timings["total_s"])
        if log.isEnabledFor(logging.DEBUG):
            log.debug("turn %d text: %r", turn.id, turn.text)

    @staticmethod
    def usage(turn: Turn, info: GenInfo) -> dict[str, Any]:
        return {
            "prompt_tokens": len(turn.prompt_ids), "completion_tokens": len(turn.completion_ids),
            "total_tokens": len(turn.prompt_ids) + len(turn.completion_ids),
            "prompt_tokens_details": {"cached_tokens": info.n_cached},
        }
