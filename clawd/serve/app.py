"""The HTTP surface: OpenAI-compatible routes, server-sent events, auth, OpenAI-style errors."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import is_loopback
from ..store.answers import AdaptersState, Asked, FeedbackAnswer, Published, Status
from ..store.hints import feedback_hint
from ..store.records import Feedback
from ..store.store import StorageError
from . import protocol
from .chat import ChatService, Event, Prepared
from .dashboard import add_dashboard, cookie_name, cookie_token, locked_page

log = logging.getLogger("clawd.serve")


def _error(e: protocol.ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class _Guard:
    """Plain ASGI middleware (streaming and disconnects pass through untouched), on every route but
    /health: the API key, compared in constant time, from the Bearer header (API clients) or the
    dashboard's cookie (set by opening /?key=KEY); bodies over the limit refused early.

    Two checks keep web pages the user visits from driving a local daemon through the browser: on
    loopback the Host must be a loopback name (DNS rebinding would otherwise make another site
    same-origin and let it read the recorded turns), and a request that changes something must
    not come from another origin (a cross-site form POST needs no CORS)."""

    def __init__(self, app, api_key: str | None, max_body: int, local_only: bool, port: int):
        self.app, self.api_key, self.max_body, self.local_only = app, api_key, max_body, local_only
        self.token, self.cookie = cookie_token(api_key) if api_key else "", cookie_name(port)  # "": no key, no cookie

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = None if scope["path"] == "/health" else self._refusal(scope, headers)
        length = headers.get("content-length", "")
        if refusal is None and length.isdigit() and int(length) > self.max_body:
            refusal = _error(protocol.ApiError(413, f"Request body is larger than {self.max_body} bytes (setting "
                                                    "max_body_bytes).", code="request_too_large"))
        if refusal is not None:
            return await refusal(scope, receive, send)
        return await self.app(scope, receive, send)

    def _refusal(self, scope, headers: dict[str, str]) -> Response | None:
        host = headers.get("host", "")
        name = host[1:host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0]
        if self.local_only and host and not is_loopback(name):
            return _error(protocol.ApiError(403, f"Host '{host}' refused: clawd listens on loopback only; open "
                                                 "http://127.0.0.1:PORT.", code="host_not_allowed"))
        origin = headers.get("origin")
        if origin is not None and scope["method"] not in ("GET", "HEAD") and origin not in (f"http://{host}",
                                                                                          f"https://{host}"):
            return _error(protocol.ApiError(403, f"Cross-origin request from {origin} refused.", code="cross_origin"))
        if not self.api_key:
            return None
        path = scope["path"]
        if path == "/":
            given = parse_qs(scope["query_string"].decode("latin-1")).get("key")
            if given is not None:  # /?key=KEY: swap the key in the address bar for a cookie
                if not hmac.compare_digest(given[0].encode(), self.api_key.encode()):
                    return locked_page()
                r = RedirectResponse("/", status_code=303, headers={"Referrer-Policy": "no-referrer"})
                r.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
                return r
        if hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {self.api_key}".encode()):
            return None
        cookies = dict(c.strip().partition("=")[::2] for c in headers.get("cookie", "").split(";") if "=" in c)
        if hmac.compare_digest(cookies.get(self.cookie, "").encode(), self.token.encode()):
            return None
        if path == "/" or path.startswith("/static/"):
            return locked_page()
        return _error(protocol.ApiError(401, "Incorrect API key provided. Pass it as 'Authorization: Bearer KEY' "
                                             "(the dashboard: open /?key=KEY once).", code="invalid_api_key"))


def create_app(daemon: Any) -> FastAPI:
    """`daemon` carries settings, engine, store and chat (see clawd.daemon.Daemon)."""
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        # uvicorn re-raises SIGTERM once it has shut down, ending the process before any code
        # after uvicorn.run: stopping work belongs here
        await asyncio.to_thread(daemon.close)

    app = FastAPI(title="clawd", version="0.1.0", lifespan=lifespan)
    app.state.daemon = daemon
    settings = daemon.settings

    app.add_middleware(_Guard, api_key=settings.api_key, max_body=settings.max_body_bytes,
                       local_only=is_loopback(settings.host), port=settings.port)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(protocol.ApiError(exc.status_code, msg, code=code))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return _error(protocol.ApiError(400, f"Invalid request: {exc.errors()[0].get('msg')}"))

    @app.exception_handler(protocol.ApiError)
    async def api_error(request: Request, exc: protocol.ApiError):
        return _error(exc)

    @app.exception_handler(StorageError)
    async def storage(request: Request, exc: StorageError):
        log.error("%s %s refused: %s", request.method, request.url.path, exc)
        return _error(_storage_unavailable(str(exc)))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return _error(protocol.ApiError(500, "Internal error; see the daemon log.", type="server_error"))

    add_dashboard(app, daemon)  # the page at / and the endpoints it reads
    app.include_router(router)
    return app


# -- the routes: module level, each with the record it answers (so /openapi.json describes them) --
router = APIRouter()


def _daemon(request: Request) -> Any:
    return request.app.state.daemon


def _body_schema(model: type) -> dict[str, Any]:
    """A request body's schema for OpenAPI, for the routes that read their body themselves (to answer
    a bad one in OpenAI's error format, with the parameter named)."""
    return {"requestBody": {"content": {"application/json": {"schema": TypeAdapter(model).json_schema()}}}}


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    daemon = _daemon(request)
    return {"object": "list", "data": [
        {"id": daemon.settings.model_id, "object": "model", "created": int(daemon.started), "owned_by": "clawd",
         "context_length": daemon.engine.n_ctx, "adapter": daemon.engine.adapter_version}]}


@router.get("/v1/clawd/status", responses={200: {"model": Status}})
async def status(request: Request) -> dict[str, Any]:
    """What the daemon is and is doing: `clawd status` decodes it (Status.from_json)."""
    return (await asyncio.to_thread(_daemon(request).status)).to_json()  # reads the database: off the event loop


@router.post("/v1/feedback", responses={200: {"model": FeedbackAnswer}}, openapi_extra=_body_schema(protocol.FeedbackRequest))
async def feedback(request: Request) -> dict[str, Any]:
    """Explicit feedback on an answer: {"id": completion id, "score": 1 | -1, "comment"?}.
    It overrides the judge's score for training; a later one replaces an earlier one."""
    daemon = _daemon(request)
    try:
        body = json.loads(await request.body())
    except ValueError as e:
        raise protocol.ApiError(400, f"We could not parse the JSON body of your request: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise protocol.ApiError(400, 'Send {"id": "<completion id>", "score": 1 or -1}.', param="id")
    score, comment = body.get("score"), body.get("comment")
    if type(score) is not int or score not in (1, -1):  # bool is an int subclass: true is not a score
        raise protocol.ApiError(400, f"Invalid value for 'score': {score!r}; use 1 or -1.", param="score")
    if comment is not None and not isinstance(comment, str):
        raise protocol.ApiError(400, "Invalid value for 'comment': a string or null.", param="comment")
    turn = await asyncio.to_thread(daemon.store.turn_by_completion_id, body["id"])
    if turn is None:
        raise protocol.ApiError(404, f"No completion with id '{body['id']}' was recorded.", param="id",
                                code="not_found")
    ns = await asyncio.to_thread(daemon.store.next_state, turn.id)
    hint, refused = feedback_hint(comment, turn, ns)
    await asyncio.to_thread(daemon.store.set_feedback, Feedback(turn_id=turn.id, score=score, comment=comment, hint=hint))
    out = asdict(FeedbackAnswer(True, body["id"], turn.id, score, hint is not None, refused))
    return out if refused else {k: v for k, v in out.items() if k != "hint_refused"}


# -- adapters (publish): daemon.adapters raises LookupError (unknown version) or ValueError
@router.get("/v1/clawd/adapters", responses={200: {"model": AdaptersState}})
async def adapters_list(request: Request) -> dict[str, Any]:
    return asdict(await asyncio.to_thread(_daemon(request).adapters.list))


@router.post("/v1/clawd/adapters/{action}", responses={200: {"model": AdaptersState | Published | dict[str, Any]}},
             openapi_extra=_body_schema(protocol.AdapterRequest))
async def adapters_action(action: str, request: Request) -> dict[str, Any]:
    """use | off | rollback: the adapters' state after it; publish: the gate's verdict (Published);
    merge: the merged model and its record."""
    daemon = _daemon(request)
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise protocol.ApiError(400, f"We could not parse the JSON body of your request: {e}") from None
    version = body.get("version") if isinstance(body, dict) else None
    if action == "use" and not isinstance(version, int):
        raise protocol.ApiError(400, 'Send {"version": N}.', param="version")
    calls = {"use": lambda: daemon.adapters.use(version), "off": daemon.adapters.off,
             "rollback": daemon.adapters.rollback, "publish": lambda: daemon.adapters.publish(version),
             "merge": daemon.adapters.merge}
    if action not in calls:
        raise protocol.ApiError(404, f"Unknown adapter action {action!r}; one of {', '.join(calls)}.", code="not_found")
    try:
        out = await asyncio.to_thread(calls[action])  # a swap waits for the request generating now
    except LookupError as e:
        raise protocol.ApiError(404, str(e).strip("'\""), code="adapter_not_found") from None
    except ValueError as e:
        raise protocol.ApiError(400, str(e), code="adapter_refused") from None
    return out if isinstance(out, dict) else asdict(out)


# -- background work by hand (`clawd train --once`, `clawd judge --once` with the daemon up)
@router.post("/v1/clawd/train", responses={200: {"model": Asked}})
async def ask_train(request: Request) -> dict[str, Any]:
    return await _ask(_daemon(request), "train")


@router.post("/v1/clawd/judge", responses={200: {"model": Asked}})
async def ask_judge(request: Request) -> dict[str, Any]:
    return await _ask(_daemon(request), "judge")


async def _ask(daemon: Any, job: str) -> dict[str, Any]:
    if not daemon.settings.auto_learn:
        raise protocol.ApiError(409, "auto_learn is off, so this daemon runs no background work; "
                                     f"`clawd {job} --once` runs it in its own process.", code="auto_learn_off")
    daemon.scheduler.ask(job)
    return asdict(Asked(job, daemon.scheduler.state.doing, await asyncio.to_thread(daemon.ready_to_train),
                        daemon.round_batch(), await asyncio.to_thread(daemon.judge.backlog_size),
                        await asyncio.to_thread(daemon.ready_groups)))


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    daemon = _daemon(request)
    settings = daemon.settings
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise protocol.ApiError(415, f"Unsupported content type '{ctype}': send application/json.")
    raw = await request.body()
    if len(raw) > settings.max_body_bytes:
        raise protocol.ApiError(413, f"Request body is larger than {settings.max_body_bytes} bytes.",
                                code="request_too_large")
    req = protocol.parse_request(raw)
    headers = {k.lower(): v for k, v in request.headers.items()}
    chat: ChatService = daemon.chat
    if not chat.admit():
        raise protocol.ApiError(503, f"clawd is busy: {chat.in_flight} requests are already queued "
                                     "(setting max_queue). Retry shortly.", type="server_error",
                                code="queue_full", headers={"Retry-After": "2"})
    try:
        # Tokenizing a long prompt takes a while; keep the event loop free meanwhile.
        prepared = await asyncio.to_thread(chat.prepare, req, headers)
    except BaseException:
        chat.release()
        raise
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        # The worker starts here, not inside the generator: it must run (and release its
        # admission) even if the client vanishes before the response body is iterated.
        return StreamingResponse(_sse(prepared, *_start(chat, prepared), include_usage, settings.model_id),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await _complete(chat, prepared, request, settings.model_id)


def _storage_unavailable(message: str) -> protocol.ApiError:
    return protocol.ApiError(503, message, type="server_error", code="storage_unavailable",
                             headers={"Retry-After": "30"})


def _event_error(ev: Event) -> protocol.ApiError:
    if ev.status == 503:  # the turn could not be recorded
        return _storage_unavailable(ev.text)
    return protocol.ApiError(500, ev.text, type="server_error")


def _start(chat: ChatService, p: Prepared) -> tuple[asyncio.Queue, threading.Event]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event] = asyncio.Queue()
    cancel = threading.Event()
    threading.Thread(target=chat.run, args=(p, lambda ev: loop.call_soon_threadsafe(queue.put_nowait, ev), cancel),
                     name=f"turn-{p.turn.id}", daemon=True).start()
    return queue, cancel


def _logprobs(entries: list[dict] | None) -> dict | None:
    return None if entries is None else {"content": entries, "refusal": None}


def _chunk(p: Prepared, model: str, delta: dict | None, finish: str | None = None, usage: dict | None = None,
           logprobs: list[dict] | None = None) -> str:
    body: dict[str, Any] = {"id": p.turn.completion_id, "object": "chat.completion.chunk", "created": p.created,
                            "model": model, "system_fingerprint": None,
                            "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": _logprobs(logprobs),
                                                                  "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _sse(p: Prepared, queue: asyncio.Queue, cancel: threading.Event, include_usage: bool,
               model: str) -> AsyncIterator[str]:
    try:
        yield _chunk(p, model, {"role": "assistant", "content": ""})
        while True:
            ev = await queue.get()
            if ev.kind == "content":
                yield _chunk(p, model, {"content": ev.text}, logprobs=ev.logprobs)
            elif ev.kind == "tool_calls":
                for i, c in enumerate(ev.calls):
                    yield _chunk(p, model, {"tool_calls": [{"index": i, **c.to_openai()}]})
            elif ev.kind == "error":
                yield f"data: {json.dumps(_event_error(ev).body())}\n\n"
                return
            elif ev.kind == "done":
                yield _chunk(p, model, {}, finish=ev.finish, logprobs=ev.logprobs)
                if include_usage:
                    yield _chunk(p, model, None, usage=ev.usage)
                yield "data: [DONE]\n\n"
                return
    finally:
        cancel.set()  # the client left (or we finished): stop decoding at the next token


async def _complete(chat: ChatService, p: Prepared, request: Request, model: str) -> JSONResponse:
    queue, cancel = _start(chat, p)
    content, calls, done = "", [], None
    entries: list[dict] | None = [] if p.logprobs else None
    while done is None:
        try:
            ev = await asyncio.wait_for(queue.get(), timeout=0.5)
        except TimeoutError:
            if await request.is_disconnected():
                cancel.set()
            continue
        if entries is not None and ev.logprobs:
            entries += ev.logprobs
        if ev.kind == "content":
            content += ev.text
        elif ev.kind == "tool_calls":
            calls = [c.to_openai() for c in ev.calls]
        elif ev.kind == "error":
            raise _event_error(ev)
        elif ev.kind == "done":
            done = ev
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if calls:
        message["tool_calls"] = calls
    return JSONResponse({
        "id": p.turn.completion_id, "object": "chat.completion", "created": p.created, "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": _logprobs(entries), "finish_reason": done.finish}],
        "usage": done.usage,
    })
