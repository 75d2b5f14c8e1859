"""A loopback HTTP server that answers every request with the error a test gives it.

What moto cannot produce (access denied, throttling, 5xx) is played this way: the test sets the
server's :attr:`CannedServer.answer` to AWS's documented shape of an error (:func:`batch_error`,
:func:`s3_error`) and points botocore at :attr:`CannedServer.endpoint_url`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


class CannedServer(ThreadingHTTPServer):
    answer: Answer = (500, {}, b"")

    @property
    def endpoint_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Canned(BaseHTTPRequestHandler):
    server: CannedServer

    def _reply(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, headers, body = self.server.answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve() -> Iterator[CannedServer]:
    server = CannedServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def batch_error(status: int, code: str, message: str) -> Answer:
    """An error as AWS Batch (a JSON API) sends it."""
    body = json.dumps({"__type": code, "message": message}).encode()
    return status, {"Content-Type": "application/json", "x-amzn-ErrorType": code}, body


def s3_error(status: int, code: str, message: str) -> Answer:
    """An error as S3 (an XML API) sends it."""
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message>"
    return status, {"Content-Type": "application/xml"}, (body + "<RequestId>1</RequestId></Error>").encode()
