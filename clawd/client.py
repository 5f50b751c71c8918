"""The daemon's HTTP API as the `clawd` command uses it: one client, one place for the address,
the API key and what an error answer means."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from .config import Settings


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
