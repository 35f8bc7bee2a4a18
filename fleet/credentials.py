"""Credentials for the HTTP calls the shell makes (the Prometheus pull, the webhook), read when used, never shown.

A config names where a secret lives (a file or an environment variable), never
the secret itself, so a config file can be committed and printed. The secret is
read at each call (a rotated token file is picked up), goes only into the
`Authorization` header, and no repr, log line or error message carries it.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.request
from pathlib import Path

from pydantic import model_validator

from fleet.core.errors import ConfigError
from fleet.core.scenario import Strict


class Credentials(Strict):
    """A bearer token, or basic auth (user and password); each secret from a file or an environment variable."""

    bearer_token_file: str | None = None
    bearer_token_env: str | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None

    @model_validator(mode="after")
    def _one_scheme(self) -> "Credentials":
        bearer = [k for k in ("bearer_token_file", "bearer_token_env") if getattr(self, k)]
        basic = [k for k in ("password_file", "password_env") if getattr(self, k)]
        if len(bearer) > 1 or len(basic) > 1:
            raise ValueError("give each secret once: a file or an environment variable, not both")
        if bearer and (basic or self.username):
            raise ValueError("give a bearer token or basic auth (username and password), not both")
        if bool(basic) != bool(self.username):
            raise ValueError("basic auth needs username and one of password_file or password_env")
        if not bearer and not basic:
            raise ValueError("give bearer_token_file, bearer_token_env, or username with password_file or password_env")
        return self

    def _secret(self, file: str | None, env: str | None, what: str) -> str:
        if file:
            try:
                value = Path(file).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise ConfigError(f"{what} file {file!r}: cannot be read ({err.strerror or err})") from None
            if not value:
                raise ConfigError(f"{what} file {file!r} is empty")
            return value
        value = os.environ.get(env or "", "")
        if not value:
            raise ConfigError(f"{what}: environment variable {env!r} is not set")
        return value

    def authorization(self) -> str:
        """The `Authorization` header's value; a ConfigError (naming the file or variable, not the secret) if unreadable."""
        if self.bearer_token_file or self.bearer_token_env:
            return "Bearer " + self._secret(self.bearer_token_file, self.bearer_token_env, "bearer token")
        password = self._secret(self.password_file, self.password_env, "password")
        return "Basic " + base64.b64encode(f"{self.username}:{password}".encode()).decode("ascii")

    def headers(self) -> dict[str, str]:
        return {"Authorization": self.authorization()}


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: following would send the request and its credentials to an address the operator did
    not configure (and take that address's answer as the configured one's). The 3xx surfaces as an HTTPError."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def http_opener() -> urllib.request.OpenerDirector:
    """The shell's one HTTP client (the Prometheus pull, the webhook): redirects refused, certificates checked with
    the default SSL context."""
    return urllib.request.build_opener(_RefuseRedirects(), urllib.request.HTTPSHandler(context=ssl.create_default_context()))
