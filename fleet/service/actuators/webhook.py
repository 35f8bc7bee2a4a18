"""The webhook actuator: each decision POSTed as JSON, its key as the Idempotency-Key header, the lease's epoch as
Fleet-Lease-Epoch. A redirect is refused, never followed; certificates are checked against the system's trust store."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from pydantic import Field, model_validator

from fleet.core.errors import ConfigError, hide_passwords
from fleet.core.retry import PERMANENT, TRANSIENT
from fleet.core.scenario import Strict
from fleet.credentials import Credentials, http_opener
from fleet.service.acting import ActuatorError
from fleet.service.actuators.base import decision_payload
from storage.values import JournalRow


def _http_outcome(code: int) -> str:
    """5xx and 429 (the receiver is busy or down) are transient; any other 4xx is the receiver's "no" to this
    request, so retrying it cannot help."""
    return TRANSIENT if code >= 500 or code in (408, 429) else PERMANENT


class WebhookSettings(Strict):
    """The webhook actuator's table, `[actuator.webhook]`: where to POST, how long to wait, and the credentials."""

    url: str = ""
    timeout_s: float = Field(default=60, gt=0)
    auth: Credentials | None = None

    @model_validator(mode="after")
    def _http(self) -> "WebhookSettings":
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("the webhook actuator needs url = 'http(s)://...'")
        return self


@dataclass
class Webhook:
    """POST each decision as JSON to `url`, with its key as the Idempotency-Key header; any 2xx means done.

    A redirect is a failure (never followed), certificates are checked (the default SSL context), and `timeout_s`
    bounds the connection and each wait for the server. The Authorization header goes only to `url`, and no error or
    log line carries it."""

    url: str
    timeout_s: float = 30.0
    auth: Credentials | None = None
    name: str = "webhook"
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._opener = http_opener()

    @classmethod
    def of(cls, settings: WebhookSettings) -> "Webhook":
        return cls(settings.url, settings.timeout_s, settings.auth)

    def check(self) -> tuple[bool, str]:
        return True, f"webhook to {hide_passwords(self.url)}"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        shown = hide_passwords(self.url)
        body = json.dumps(decision_payload(row, epoch)).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": row.key or str(row.id)}
        if epoch is not None:
            headers["Fleet-Lease-Epoch"] = str(epoch)
        if self.auth is not None:
            try:
                headers.update(self.auth.headers())
            except ConfigError as err:  # a token file being rotated: retried on the next pass
                raise ActuatorError(f"actuator webhook {shown!r}: {err}") from None
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                status = resp.status
        except urllib.error.HTTPError as err:
            location = err.headers.get("Location") if err.headers is not None else None
            err.close()
            if 300 <= err.code < 400:
                raise ActuatorError(f"actuator webhook {shown!r}: HTTP {err.code} redirect to "
                                    f"{hide_passwords(location or '(no Location)')!r}, not followed") from None
            raise ActuatorError(f"actuator webhook {shown!r}: HTTP {err.code}", outcome=_http_outcome(err.code)) from None
        except (urllib.error.URLError, OSError) as err:  # no answer: refused, reset, timed out
            raise ActuatorError(f"actuator webhook {shown!r}: {hide_passwords(str(err))}") from None
        if not 200 <= status < 300:
            raise ActuatorError(f"actuator webhook {shown!r}: HTTP {status}", outcome=_http_outcome(status))

    def close(self) -> None:
        pass
