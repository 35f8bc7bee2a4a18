"""The webhook actuator: a redirect is a failure, never followed; the epoch and the credentials arrive, and the
credentials never show."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet.credentials import Credentials
from fleet.service.actuators import Webhook
from fleet.service.journal import Journal
from storage.repository import sqlite_memory_repository
from storage.service_store import JournalEntry, ServiceStore

TOKEN = "tok-3f9a1c-never-shown"


class Receiver:
    """An HTTP server on 127.0.0.1 that records each request and answers `status` (with `location`, if set)."""

    def __init__(self, status: int = 200, location: str | None = None, tls: ssl.SSLContext | None = None):
        self.status, self.location = status, location
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                       "body": self.rfile.read(length)})
                self.send_response(outer.status)
                if outer.location:
                    self.send_header("Location", outer.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = do_HEAD = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _journal(actuator) -> tuple[ServiceStore, Journal]:
    repo = sqlite_memory_repository()
    repo.declare_cards({"a": "flagship"}, 0)
    store = ServiceStore(repo.engine)
    store.journal_hour(100, [JournalEntry("100:add:a", 100, "add", "needed", "a")], {"a": "warm"}, [], [])
    return store, Journal(store, actuator, lambda: 200)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failure_and_is_not_followed(receivers, status, caplog):
    elsewhere = receivers()
    hook = receivers(status, location=elsewhere.url + "/landing")
    store, journal = _journal(Webhook(hook.url, 5, Credentials(bearer_token_env="FLEET_TEST_UNUSED")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLEET_TEST_UNUSED", TOKEN)
        with caplog.at_level(logging.WARNING, logger="fleet.service.journal"):
            out = journal.act_pending(epoch=3)
    assert out.acted == 0 and out.failed == 1
    assert f"HTTP {status} redirect to '{elsewhere.url}/landing', not followed" in out.error
    assert f"{elsewhere.url}/landing" in caplog.text  # logged with its Location
    assert [r.key for r in store.unacted()] == ["100:add:a"]
    assert len(hook.requests) == 1 and elsewhere.requests == []  # nothing, key and token included, went elsewhere
    assert TOKEN not in out.error and TOKEN not in caplog.text

    hook.status, hook.location = 200, None  # the journal retries it on its first pass after the backoff
    journal.now = journal.acting.now = lambda: 200 + 10
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLEET_TEST_UNUSED", TOKEN)
        assert journal.act_pending(epoch=3).acted == 1
    assert store.unacted() == [] and elsewhere.requests == []


def test_the_epoch_and_the_key_arrive(receivers):
    hook = receivers()
    _, journal = _journal(Webhook(hook.url, 5))
    assert journal.act_pending(epoch=7).acted == 1
    (got,) = hook.requests
    assert got["method"] == "POST"
    assert got["headers"]["Fleet-Lease-Epoch"] == "7" and got["headers"]["Idempotency-Key"] == "100:add:a"
    assert got["headers"]["Content-Type"] == "application/json"
    body = json.loads(got["body"])
    assert body["epoch"] == 7 and body["key"] == "100:add:a" and body["kind"] == "add" and body["card"] == "a"
    assert "Authorization" not in got["headers"]


def test_without_an_epoch_no_epoch_header_is_sent(receivers):
    hook = receivers()
    _, journal = _journal(Webhook(hook.url, 5))
    assert journal.act_pending().acted == 1
    assert "Fleet-Lease-Epoch" not in hook.requests[0]["headers"]
    assert json.loads(hook.requests[0]["body"])["epoch"] is None


def test_credentials_arrive_from_a_file_and_from_the_environment(receivers, tmp_path, monkeypatch):
    hook = receivers()
    (tmp_path / "token").write_text(TOKEN + "\n")
    _, journal = _journal(Webhook(hook.url, 5, Credentials(bearer_token_file=str(tmp_path / "token"))))
    assert journal.act_pending().acted == 1
    assert hook.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"

    monkeypatch.setenv("FLEET_TEST_WEBHOOK_PASSWORD", "pw-" + TOKEN)
    _, journal = _journal(Webhook(hook.url, 5, Credentials(username="fleet", password_env="FLEET_TEST_WEBHOOK_PASSWORD")))
    assert journal.act_pending().acted == 1
    assert hook.requests[-1]["headers"]["Authorization"] == "Basic " + base64.b64encode(f"fleet:pw-{TOKEN}".encode()).decode()


def test_a_failing_webhook_never_shows_its_token(receivers, monkeypatch, caplog):
    monkeypatch.setenv("FLEET_TEST_WEBHOOK_TOKEN", TOKEN)
    auth = Credentials(bearer_token_env="FLEET_TEST_WEBHOOK_TOKEN")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_url = f"http://127.0.0.1:{closed.getsockname()[1]}/hook"
    closed.close()
    failing = receivers(500)
    seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for url in (failing.url, refused_url):
            hook = Webhook(url, 5, auth)
            store, journal = _journal(hook)
            out = journal.act_pending(epoch=1)
            assert out.failed == 1 and store.unacted()
            seen += [out.error, repr(hook), str(hook)]
    assert failing.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # it was sent, to the URL only
    assert "HTTP 500" in seen[0] and "Connection refused" in seen[3]
    assert all(TOKEN not in text for text in seen + [caplog.text])

    monkeypatch.delenv("FLEET_TEST_WEBHOOK_TOKEN")  # an unreadable secret is a failed action, retried later
    store, journal = _journal(Webhook(failing.url, 5, auth))
    out = journal.act_pending()
    assert out.failed == 1 and "environment variable 'FLEET_TEST_WEBHOOK_TOKEN' is not set" in out.error
    assert store.unacted() and len(failing.requests) == 1


def test_a_receiver_that_never_answers_times_out(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # connections queue in the kernel; nothing ever answers
    try:
        store, journal = _journal(Webhook(f"http://127.0.0.1:{silent.getsockname()[1]}/hook", 0.5))
        out = journal.act_pending()
    finally:
        silent.close()
    assert out.failed == 1 and "timed out" in out.error and store.unacted()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a self-signed certificate")
def test_an_untrusted_certificate_is_refused(receivers, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    hook = receivers(tls=tls)
    store, journal = _journal(Webhook(hook.url, 5))
    out = journal.act_pending()
    assert out.failed == 1 and "CERTIFICATE_VERIFY_FAILED" in out.error and store.unacted()
    assert hook.requests == []
