"""The dashboard (issue 17): the page at `/`, its static files, and the endpoints it reads and
steers with. Every action of the page is one of these HTTP calls (or /v1/feedback and
/v1/clawd/adapters/…, which the CLI uses too); the page never sees the database.

The data endpoints are plain Store reads run off the event loop: they never wait for the
engine, so they answer while a generation runs. The page is static: the files ship in the
package (clawd/serve/static/), nothing is fetched off the machine, and a strict
Content-Security-Policy allows only those files to run or style it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from dataclasses import asdict
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from ..store.answers import Learning, RewardTrend, SessionExcluded, SessionPage, TurnPage
from . import protocol

log = logging.getLogger("clawd.serve")

# Nothing but the daemon's own files: no inline script or style, no frame, no form, no plugin.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-cache"}
STATIC_TYPES = {"app.js": "text/javascript; charset=utf-8", "charts.js": "text/javascript; charset=utf-8",
                "style.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"}
MAX_LIMIT = 100


def cookie_name(port: int) -> str:
    """Named after the port: browsers do not keep cookies apart by port, and two daemons on one
    machine may have different keys."""
    return f"clawd_key_{port}"


def cookie_token(api_key: str) -> str:
    """What the page's cookie holds: derived from the key, so the cookie jar never stores the key."""
    return hmac.new(api_key.encode(), b"clawd dashboard cookie", hashlib.sha256).hexdigest()


def _file(name: str) -> bytes:
    return (resources.files("clawd.serve") / "static" / name).read_bytes()


def page(name: str, status: int = 200, media_type: str = "text/html; charset=utf-8") -> Response:
    """One of the shipped static files with the page's security headers."""
    return Response(_file(name), status_code=status, media_type=media_type, headers=PAGE_HEADERS)


def locked_page() -> Response:
    """GET / without the API key: say how to open it, in a page that runs nothing."""
    return page("locked.html", status=401)


def _int(request: Request, name: str, default: int | None, lo: int = 1, hi: int = 2**62) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        allowed = f"from {lo} to {hi}" if hi < 2**62 else f"of at least {lo}"
        raise protocol.ApiError(400, f"Invalid value for '{name}': {raw!r}; an integer {allowed}.", param=name)
    return value


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise protocol.ApiError(400, f"We could not parse the JSON body of your request: {e}") from None
    if not isinstance(body, dict):
        raise protocol.ApiError(400, "The request body must be a JSON object.")
    return body


def _page_of(rows: list, limit: int | None) -> dict[str, Any]:
    """A keyset page: pass `next_before` as `before` for the next (older) one; null at the end."""
    return {"object": "list", "data": [asdict(r) for r in rows],
            "next_before": rows[-1].id if len(rows) == limit else None}


def add_dashboard(app: FastAPI, daemon: Any) -> None:
    store = daemon.store

    @app.get("/", include_in_schema=False)
    async def index():
        return page("index.html")

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        if name not in STATIC_TYPES:  # a fixed list: no path from the URL reaches the file system
            raise protocol.ApiError(404, f"No static file '{name}'.", code="not_found")
        return page(name, media_type=STATIC_TYPES[name])

    @app.get("/v1/clawd/turns", responses={200: {"model": TurnPage}})
    async def turns(request: Request):
        """Recent turns, newest first: ?before=ID (keyset), ?limit=N (≤ 100), ?session=ID."""
        limit = _int(request, "limit", 20, hi=MAX_LIMIT)
        rows = await asyncio.to_thread(store.turn_views, _int(request, "before", None), limit,
                                       _int(request, "session", None))
        return _page_of(rows, limit)

    @app.get("/v1/clawd/sessions", responses={200: {"model": SessionPage}})
    async def sessions(request: Request):
        """Sessions, newest first, each with its turns' rewards: ?before=ID, ?limit=N."""
        limit = _int(request, "limit", 20, hi=MAX_LIMIT)
        return _page_of(await asyncio.to_thread(store.session_views, _int(request, "before", None), limit), limit)

    @app.get("/v1/clawd/rewards", responses={200: {"model": RewardTrend}})
    async def rewards(request: Request):
        """The reward trend: every scored turn, oldest first, in ?buckets=N (≤ 200) runs of equal size."""
        buckets = _int(request, "buckets", 48, hi=200)
        trend = await asyncio.to_thread(store.reward_trend, buckets)
        n = sum(b.n for b in trend)
        mean = sum(b.mean * b.n for b in trend) / n if n else None
        return {"object": "reward_trend", "scored": n, "mean": mean, "buckets": [asdict(b) for b in trend]}

    @app.post("/v1/clawd/sessions/{session_id}/{action}", responses={200: {"model": SessionExcluded}})
    async def session_action(session_id: str, action: str):
        """exclude: the session's turns are never trained on (nor replayed by the gate); include: undo."""
        if action not in ("exclude", "include"):
            raise protocol.ApiError(404, f"Unknown session action {action!r}; one of exclude, include.",
                                    code="not_found")
        if not (session_id.isascii() and session_id.isdigit() and int(session_id) < 2**62):
            raise protocol.ApiError(400, f"Invalid session id {session_id!r}; an integer.", param="session_id")
        excluded = action == "exclude"
        if not await asyncio.to_thread(store.set_session_excluded, int(session_id), excluded):
            raise protocol.ApiError(404, f"No session {session_id}.", param="session_id", code="not_found")
        log.info("session %s %s training", session_id, "excluded from" if excluded else "included again in")
        return {"ok": True, "session_id": int(session_id), "excluded": excluded}

    @app.get("/v1/clawd/learning", responses={200: {"model": Learning}})
    async def learning():
        return {"paused": await asyncio.to_thread(store.learning_paused)}

    @app.post("/v1/clawd/learning/{action}", responses={200: {"model": Learning}})
    async def learning_action(action: str, request: Request):
        """pause: no training round starts or finishes publishing (a round under way stops at its
        checkpoint); judging goes on. resume: back to normal. Kept in the database across restarts."""
        await _body(request)  # a malformed body is still a 400, though none is needed
        if action not in ("pause", "resume"):
            raise protocol.ApiError(404, f"Unknown learning action {action!r}; one of pause, resume.",
                                    code="not_found")
        await asyncio.to_thread(store.set_learning_paused, action == "pause")
        log.info("learning %s by the user", "paused" if action == "pause" else "resumed")
        return {"paused": action == "pause"}
