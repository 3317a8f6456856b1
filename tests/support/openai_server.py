"""The tests' one fake LLM: a real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions API from a script.

Tests point DSPy at it (``api_base=server.base_url``) so the whole LLM path runs
for real: HTTP, LiteLLM, DSPy's adapter, our parser, the runner, the store. The
script decides each answer and can inject faults (HTTP 500, 429 with
Retry-After, answers slower than the client's timeout, unparseable text).

It binds port 0 (a free port per server, so parallel test workers never collide). With ``token_logprob`` it
also returns token log-probabilities when a request asks for ``logprobs`` (the confidence tests, issue 23): the
answer text is split into tokens (words, then single other characters) and each token gets the log-probability
``token_logprob`` gives it; ``with_logprobs=False`` plays a server that ignores the request.
:class:`ConfidenceServer` is that configuration under its old name; the demo-sensitive judge of the
``optimize`` tests is a responder for this server (:mod:`tests.support.demo_judge`).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server answers to one request."""

    text: str = ""
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 10
    completion_tokens: int = 5


Responder = Callable[[dict[str, Any]], "Reply | str"]

_TOKEN = re.compile(r"\w+|\W")


def tokens(text: str) -> list[str]:
    """How this server splits an answer into tokens (their concatenation is the text)."""
    return _TOKEN.findall(text)


class _Server(ThreadingHTTPServer):
    # The default listen backlog of 5 refuses connections when 32 clients connect at once.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (the SIGKILL tests) or gone after its timeout is expected, not an error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ScriptedOpenAIServer:
    """Serve ``/v1/chat/completions`` (and ``/v1/models``) from a responder function.

    Args:
        responder: Called with the request body (parsed JSON); returns a :class:`Reply`
            or just the assistant text.
        model: The model name to report.
        token_logprob: The log-probability of each answer token, returned when a request asks for
            ``logprobs`` (None: never returned).
        with_logprobs: Whether to return log-probabilities at all when asked.

    Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT/v1`` and
    ``requests`` lists every chat request body received (thread-safe).
    """

    def __init__(self, responder: Responder, model: str = "scripted", *,
                 token_logprob: Callable[[str], float] | None = None, with_logprobs: bool = True) -> None:
        self.responder = responder
        self.model = model
        self.token_logprob, self.with_logprobs = token_logprob, with_logprobs
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.times: list[float] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm meets the
            # client's delayed ACK and every answer waits ~40 ms more than scripted.
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers_seen.append(dict(self.headers))
                    server.times.append(time.monotonic())
                reply = server.responder(body)
                if isinstance(reply, str):
                    reply = Reply(text=reply)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    self._send(reply.status, {"error": {"message": f"scripted {reply.status}", "type": "server_error"}},
                               reply.headers)
                    return
                choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": reply.text}}
                if body.get("logprobs") and server.token_logprob is not None and server.with_logprobs:
                    choice["logprobs"] = {"content": [
                        {"token": t, "logprob": server.token_logprob(t), "bytes": list(t.encode()), "top_logprobs": []}
                        for t in tokens(reply.text)]}
                self._send(200, {
                    "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", server.model),
                    "choices": [choice],
                    "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                              "total_tokens": reply.prompt_tokens + reply.completion_tokens},
                }, reply.headers)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer

        return Handler


class ConfidenceServer(ScriptedOpenAIServer):
    """:class:`ScriptedOpenAIServer` that returns token log-probabilities when asked (the confidence tests).

    Args:
        responder: The answer text for a request body.
        token_logprob: The log-probability of each token, when the request asks for them.
        with_logprobs: Whether to return log-probabilities at all when asked.
    """

    def __init__(self, responder: Callable[[dict[str, Any]], str], token_logprob: Callable[[str], float], *,
                 with_logprobs: bool = True) -> None:
        super().__init__(responder, model="confidence", token_logprob=token_logprob, with_logprobs=with_logprobs)


def last_user_message(body: dict[str, Any]) -> str:
    """The text of the last user message of a chat request."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


def main() -> None:
    """Serve one fixed answer after a fixed delay, in its own process (benchmarks: no GIL shared with the client).

    Prints ``READY <base_url>`` on stdout once listening; serves until killed.
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--answer", required=True, help="assistant text of every reply")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    with ScriptedOpenAIServer(lambda body: Reply(text=args.answer, delay=args.latency)) as server:
        print(f"READY {server.base_url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
