"""A tiny auth server speaking nsqd's auth-http protocol, for tests (stdlib http.server in a
thread on 127.0.0.1, any free port).

Replies are looked up by secret in :attr:`AuthServer.replies` (``(status, JSON-able body)``);
an unknown secret gets 403. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    raw_query: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def values(self) -> dict[str, str]:
        """The auth parameters, from the query (GET) or the JSON body (POST)."""
        if self.method == "POST":
            result: dict[str, str] = json.loads(self.body)
            return result
        return self.query


@dataclass
class AuthServer:
    replies: dict[str, tuple[int, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> AuthServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                request = Request(
                    self.command, url.path, url.query, query, dict(self.headers), body
                )
                owner.requests.append(request)
                status, reply = owner.replies.get(request.values.get("secret", ""), (403, {}))
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _answer
            do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
