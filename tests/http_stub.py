"""A local HTTP server answering POSTs with JSON, for token-endpoint stand-ins in tests.

Shared by the unit tests (tests/test_oauthbearer.py) and the secured test cluster
(integration_tests/secure_kafka.py), so both speak HTTP the same way.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import urllib.parse
from typing import Callable, Union

# (path, request headers, form fields) -> (status, JSON document or raw body)
Answer = Callable[[str, dict, dict], "tuple[int, Union[dict, bytes]]"]


def serve_json_posts(answer: Answer, tls: ssl.SSLContext | None = None,
                     poll_interval: float = 0.05) -> http.server.ThreadingHTTPServer:
    """Start a server on 127.0.0.1 (an ephemeral port) in a daemon thread; ``shutdown()`` and
    ``server_close()`` stop it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, doc = answer(self.path, dict(self.headers),
                                 urllib.parse.parse_qs(body.decode()))
            out = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval},
                     daemon=True).start()
    return server
