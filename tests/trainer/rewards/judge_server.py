"""A real OpenAI-compatible judge for the llm_judge tests: a standard-library HTTP server on 127.0.0.1 that
answers POST /v1/chat/completions deterministically from the request and records what it received.

Its rule, from the one user message it gets:
- a `<solution>…</solution>` and a `<reference>…</reference>` block (the reference-match prompt): "YES" when
  the solution equals the reference (surrounding whitespace ignored), else "NO";
- else a `<response>…</response>` block (the 0-10 prompt): "Score: k" with k = len(response) % 11;
- else "I cannot judge this." (neither a score nor a verdict).

`plan` scripts the next answers instead: ("status", code) answers that HTTP status (its body echoes the
request's Authorization header, as a careless server might), ("sleep", seconds) answers late, ("empty",)
answers 200 without content. Each entry serves one request, then the rule applies again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.config.outbound import ALLOW_VAR


def block(text: str, tag: str) -> str | None:
    start, end = f"<{tag}>\n", f"\n</{tag}>"
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].rsplit(end, 1)[0]


def judge_reply(content: str) -> str:
    solution, reference = block(content, "solution"), block(content, "reference")
    if solution is not None and reference is not None:
        return "YES" if solution.strip() == reference.strip() else "NO"
    response = block(content, "response")
    if response is not None:
        return f"Score: {len(response) % 11}"
    return "I cannot judge this."


class JudgeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[dict[str, Any]] = []
        self.plan: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a late answer closed its socket: nothing to report

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_action(self) -> tuple[Any, ...] | None:
        with self.lock:
            return self.plan.pop(0) if self.plan else None


class _Handler(BaseHTTPRequestHandler):
    server: JudgeServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: dict[str, Any] | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = request["messages"][-1]["content"]
        record = {"path": self.path, "authorization": self.headers.get("Authorization"), "request": request,
                  "content": content, "host": self.headers.get("Host")}
        action = self.server.next_action()
        with self.server.lock:
            self.server.received.append(record)
        if action is not None and action[0] == "status":
            self._send(action[1], f"refused (you sent {self.headers.get('Authorization')})")
            return
        if action is not None and action[0] == "sleep":
            time.sleep(action[1])
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": f"no route {self.path}"})
            return
        reply = "" if action is not None and action[0] == "empty" else judge_reply(content)
        record["reply"] = reply
        self._send(200, {"id": "judge-1", "object": "chat.completion", "model": request.get("model"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@contextmanager
def judge_server(allow: bool = True) -> Iterator[JudgeServer]:
    """The server, running; `allow` lists its URL in the outbound allow-list (trainer.config.outbound, which
    refuses 127.0.0.1 by default) while it runs, as a deployment lists its own judge."""
    server = JudgeServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    before = os.environ.get(ALLOW_VAR)
    if allow:
        os.environ[ALLOW_VAR] = ",".join(filter(None, (before, server.base_url)))
    try:
        yield server
    finally:
        if before is None:
            os.environ.pop(ALLOW_VAR, None)
        else:
            os.environ[ALLOW_VAR] = before
        server.shutdown()
        server.server_close()


def roll_score(k: float) -> float:
    """ROLL's _parse_score of "Score: k", written out: k > 1 is read on a 0-10 scale, then clamped to [0, 1]."""
    value = k / 10 if k > 1 else k
    return min(max(value, 0.0), 1.0)
