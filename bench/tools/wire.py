"""What goes over the wire between OpenClaw and a backend without a database of its own.

    python3 -m bench.tools.wire proxy --port P --upstream http://127.0.0.1:Q --log wire.jsonl [--unstream]
    python3 -m bench.tools.wire oracle --port P --log wire.jsonl

`proxy` passes every request to the upstream (llama-cpp-python's server) unchanged, streams the
answer back as it comes, and logs each chat completion: the request and the answer's text and
tool calls as the client assembled them. With --unstream it asks the upstream for a whole answer
instead and streams that back in one go: llama-cpp-python's chatml-function-calling handler
raises "Automatic streaming tool choice is not supported" (HTTP 500) whenever the model picks a
tool in a streamed request with tool_choice auto, which is every request OpenClaw sends. `oracle` is a scripted backend that answers each task
with the calls its `oracle` field lists, then with the last tool result: a run against it checks
the bench itself (OpenClaw's tools, the workspace, the checks) without a model. Both log the same
lines, which tool_tasks.py reads the way it reads clawd's `turns`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from bench.tools.task_set import TASKS
from clawd.client import IncompleteStream, sse_events


def text_of(content: object) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def assemble(body: bytes, streamed: bool) -> dict:
    """An answer's content, tool calls (name and the arguments text, unparsed) and finish reason."""
    if not streamed:
        try:
            msg = json.loads(body)["choices"][0]
        except (ValueError, KeyError, IndexError):
            return {"content": body.decode(errors="replace")[:2000], "tool_calls": [], "finish_reason": None}
        calls = [{"name": c["function"].get("name"), "arguments": c["function"].get("arguments", "")}
                 for c in msg["message"].get("tool_calls") or []]
        return {"content": msg["message"].get("content") or "", "tool_calls": calls,
                "finish_reason": msg.get("finish_reason")}
    content, calls, finish = [], {}, None
    try:
        for ev in sse_events(body.decode(errors="replace").splitlines()):
            for ch in ev.get("choices") or []:
                delta = ch.get("delta") or {}
                content.append(delta.get("content") or "")
                for tc in delta.get("tool_calls") or []:
                    call = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    call["name"] += fn.get("name") or ""
                    call["arguments"] += fn.get("arguments") or ""
                finish = ch.get("finish_reason") or finish
    except (IncompleteStream, ValueError):
        finish = finish or "incomplete"
    return {"content": "".join(content), "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


class Log:
    def __init__(self, path: Path):
        self.path, self.lock = path, threading.Lock()

    def add(self, request: dict, answer: dict, status: int, seconds: float) -> None:
        line = json.dumps({"request": request, "answer": answer, "status": status, "seconds": round(seconds, 3)})
        with self.lock, self.path.open("a") as f:
            f.write(line + "\n")


def oracle_answer(request: dict) -> dict:
    """The next call of the task whose message the request carries, or the last tool result as text."""
    msgs = request.get("messages") or []
    users = "\n".join(text_of(m.get("content")) for m in msgs if m.get("role") == "user")
    task = next((t for t in TASKS if t.message in users), None)
    done = sum(len(m.get("tool_calls") or []) for m in msgs if m.get("role") == "assistant")
    if task and request.get("tools") and done < len(task.oracle):
        name, args = task.oracle[done]
        return {"content": "", "tool_calls": [{"name": name, "arguments": json.dumps(args)}], "finish_reason": "tool_calls"}
    results = [text_of(m.get("content")) for m in msgs if m.get("role") == "tool"]
    text = f"Done. {task.reply if task else ''} {results[-1] if results else ''}"
    return {"content": text, "tool_calls": [], "finish_reason": "stop"}


def whole(answer: dict, model: str) -> bytes:
    """An answer as one OpenAI chat completion (a request without stream)."""
    msg: dict = {"role": "assistant", "content": answer["content"] or None}
    if answer["tool_calls"]:
        msg["tool_calls"] = [{"id": f"call_{time.time_ns()}_{i}", "type": "function", "function": c}
                             for i, c in enumerate(answer["tool_calls"])]
    return json.dumps({"id": f"wire-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                       "model": model, "choices": [{"index": 0, "message": msg, "finish_reason": answer["finish_reason"]}],
                       "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}}).encode()


def sse(answer: dict, model: str) -> bytes:
    """An answer as an OpenAI chat stream: a role chunk, the content or the calls, finish, usage."""
    base = {"id": f"wire-{time.time_ns()}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    delta: dict = {"role": "assistant", "content": answer["content"] or None}
    if answer["tool_calls"]:
        delta["tool_calls"] = [{"index": i, "id": f"call_{time.time_ns()}_{i}", "type": "function",
                                "function": c} for i, c in enumerate(answer["tool_calls"])]
    chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": answer["finish_reason"]}]},
              {"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}}]
    return b"".join(f"data: {json.dumps(base | c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def handler(log: Log, upstream: str | None, unstream: bool = False) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # the wire log is the record; no access log
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if upstream is None:
                models = {"object": "list", "data": [{"id": "oracle", "object": "model", "context_length": 32768}]}
                self._send(200, json.dumps(models if self.path.startswith("/v1/models") else {"ok": True}).encode())
                return
            r = httpx.get(upstream + self.path, timeout=30)
            self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request, t0 = json.loads(raw or b"{}"), time.perf_counter()
            if upstream is None:
                answer, model = oracle_answer(request), request.get("model", "oracle")
                log.add(request, answer, 200, time.perf_counter() - t0)
                if request.get("stream"):
                    self._send(200, sse(answer, model), "text/event-stream")
                else:
                    self._send(200, whole(answer, model))
                return
            if unstream and request.get("stream"):
                self._whole(request, t0)
            else:
                self._relay(raw, request, t0)

        def _whole(self, request: dict, t0: float) -> None:
            body = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
            r = httpx.post(upstream + self.path, json=body, headers=self._auth(), timeout=httpx.Timeout(30, read=None))
            ok = r.status_code == 200
            answer = assemble(r.content, streamed=False) if ok else {"content": r.text[:2000], "tool_calls": [],
                                                                     "finish_reason": None}
            log.add(request, answer, r.status_code, time.perf_counter() - t0)
            if ok:
                self._send(200, sse(answer, request.get("model", "")), "text/event-stream")
            else:
                self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))

        def _auth(self) -> dict:
            return {k: v for k, v in self.headers.items() if k.lower() == "authorization"}

        def _relay(self, raw: bytes, request: dict, t0: float) -> None:
            headers = self._auth() | {"Content-Type": self.headers.get("Content-Type", "application/json")}
            got = bytearray()
            # No read timeout: a cold 12k-token prompt on a busy CPU takes many minutes to its first byte.
            with httpx.stream("POST", upstream + self.path, content=raw, headers=headers,
                              timeout=httpx.Timeout(30, read=None)) as r:
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in r.iter_raw():
                    got += piece
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                # Logged before the last chunk: once the client has the whole answer, so has the log.
                log.add(request, assemble(bytes(got), bool(request.get("stream"))), r.status_code, time.perf_counter() - t0)
                self.wfile.write(b"0\r\n\r\n")

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("proxy", "oracle"))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", help="the backend's base URL, for proxy")
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--unstream", action="store_true", help="proxy: ask the upstream for whole answers")
    a = ap.parse_args()
    if a.mode == "proxy" and not a.upstream:
        ap.error("proxy needs --upstream")
    upstream = a.upstream.rstrip("/") if a.mode == "proxy" else None
    ThreadingHTTPServer(("127.0.0.1", a.port), handler(Log(a.log), upstream, a.unstream)).serve_forever()


if __name__ == "__main__":
    main()
