"""A real HTTP server on 127.0.0.1 speaking OpenAI's chat completions, with token log-probabilities on request.

For the confidence tests (issue 23): when a request asks for ``logprobs``, the answer text is split into tokens
(words, then single other characters) and each token gets the log-probability the test's ``token_logprob``
gives it; ``with_logprobs=False`` plays a server that ignores the request.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOKEN = re.compile(r"\w+|\W")


def tokens(text: str) -> list[str]:
    """How this server splits an answer into tokens (their concatenation is the text)."""
    return _TOKEN.findall(text)


class ConfidenceServer:
    """Serve ``/v1/chat/completions`` from ``responder(body) -> text``; a context manager with ``base_url``.

    Args:
        responder: The answer text for a request body.
        token_logprob: The log-probability of each token, when the request asks for them.
        with_logprobs: Whether to return log-probabilities at all when asked.
    """

    def __init__(self, responder: Callable[[dict[str, Any]], str], token_logprob: Callable[[str], float], *,
                 with_logprobs: bool = True) -> None:
        self.responder, self.token_logprob, self.with_logprobs = responder, token_logprob, with_logprobs
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ConfidenceServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                text = server.responder(body)
                choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}
                if body.get("logprobs") and server.with_logprobs:
                    choice["logprobs"] = {"content": [
                        {"token": t, "logprob": server.token_logprob(t), "bytes": list(t.encode()), "top_logprobs": []}
                        for t in tokens(text)]}
                data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                   "choices": [choice],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
