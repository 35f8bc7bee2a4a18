"""One stand-in Prometheus for the pull's tests, so a change in what the pull asks or how it is answered is made in
one place: an HTTP server on 127.0.0.1 answering query_range and query with the series a test sets, and recording
each request (path, query, parameters, Authorization header) for the credential tests. Also the one way a stand-in
writes its answer, and the clock a service's telemetry job is stepped on by hand."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse
from fleet.service.simulation import SetClock as StepClock  # noqa: F401  (the tests' name for it)


def matrix(*series: dict) -> bytes:
    """A range query's answer holding `series` ({"metric": labels, "values": [[ts, "value"], ...]} each)."""
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}}).encode()


@dataclass(frozen=True)
class Request:
    path: str
    query: str  # the PromQL asked ("" if none)
    params: dict[str, list[str]]  # the whole query string, parsed
    authorization: str | None


Answer = bytes | dict | Callable[[str], bytes | dict]


class FakePrometheus:
    """What the stand-in answers, set by the test: `answers` by query text, else `otherwise` (an empty matrix unless
    set; a callable is given the query), with HTTP `status`; after `redirect(...)`, a redirect to every request."""

    def __init__(self, url: str):
        self.url = url
        self.requests: list[Request] = []
        self.answers: dict[str, Answer] = {}
        self.otherwise: Answer = matrix()
        self.status = 200
        self.location: str | None = None
        self.redirect_status = 302

    def redirect(self, location: str, status: int = 302) -> None:
        self.location, self.redirect_status = location, status

    def body(self, query: str) -> bytes:
        got = self.answers.get(query, self.otherwise)
        got = got(query) if callable(got) else got
        return got if isinstance(got, bytes) else json.dumps(got).encode()


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
    """One answer from a stand-in server: the status, the headers given, the body's length and the body."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _handler(prom: FakePrometheus) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            params = parse_qs(url.query)
            query = params.get("query", [""])[0]
            prom.requests.append(Request(url.path, query, params, self.headers.get("Authorization")))
            if prom.location is not None:
                reply(self, prom.redirect_status, headers={"Location": prom.location})
            else:
                reply(self, prom.status, prom.body(query), {"Content-Type": "application/json"})

        def log_message(self, *args):
            pass

    return Handler


@contextmanager
def fake_prometheus() -> Iterator[FakePrometheus]:
    """A stand-in Prometheus served on a free port of 127.0.0.1 for the `with` block."""
    prom = FakePrometheus("")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(prom))
    prom.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield prom
    finally:
        server.shutdown()
        server.server_close()
