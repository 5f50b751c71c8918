"""The daemon's HTTP API as the `clawd` command uses it: one client, one place for the address,
the API key and what an error answer means."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from .config import Settings
from .store.answers import AdaptersState, Asked, Published, Status


class DaemonError(RuntimeError):
    """The daemon answered with an error; the message is its own (OpenAI-style `error.message`)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class DaemonClient:
    def __init__(self, settings: Settings):
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
        self.url = f"http://{host}:{settings.port}"
        self.headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}

    def up(self) -> bool:
        """Whether a daemon answers on this address (the one-shot commands run offline when not)."""
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 900) -> Any | None:
        """The daemon's JSON answer; None when no daemon listens. An error answer raises DaemonError."""
        try:
            r = httpx.request(method, self.url + path, json=body, headers=self.headers, timeout=timeout)
        except httpx.TransportError:
            return None
        if r.status_code >= 400:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = r.text
            raise DaemonError(r.status_code, message)
        return r.json()


    # -- one typed method per endpoint the CLI uses; None when no daemon listens -----------------
    def status(self, timeout: float = 5) -> Status | None:
        d = self.call("GET", "/v1/clawd/status", timeout=timeout)
        return None if d is None else Status.from_json(d)

    def adapters(self, action: str = "list", version: int | None = None) -> AdaptersState | None:
        """list | use (version) | off | rollback: the adapters' state after it."""
        d = (self.call("GET", "/v1/clawd/adapters") if action == "list" else
             self.call("POST", f"/v1/clawd/adapters/{action}", {"version": version} if action == "use" else None))
        return None if d is None else AdaptersState.from_json(d)

    def publish(self, version: int | None = None) -> Published | None:
        d = self.call("POST", "/v1/clawd/adapters/publish", {"version": version}, timeout=3600)
        return None if d is None else Published(**d)

    def merge(self) -> dict[str, Any] | None:
        return self.call("POST", "/v1/clawd/adapters/merge", timeout=3600)

    def ask(self, job: str) -> Asked | None:
        """`train` or `judge` at the scheduler's next free tick."""
        d = self.call("POST", f"/v1/clawd/{job}", timeout=60)
        return None if d is None else Asked(**d)


class IncompleteStream(RuntimeError):
    """A stream that ended without its `data: [DONE]` line: the answer was cut off."""


def sse_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON events of an OpenAI-style chat stream (`data: {...}` lines), up to `data: [DONE]`;
    an error event is yielded like any other (its `error` key says so). Raises IncompleteStream
    when the lines end before [DONE]."""
    for line in lines:
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line[6:])
    raise IncompleteStream("the stream ended without data: [DONE]")
