"""The decision journal and the actuators that carry decisions out.

Every decision is journaled before anything acts on it: an hour's decisions and
the run-set state they leave are written in one transaction, and only then does
the actuator see them, one at a time, in journal order. Each decision has a
deterministic key and an `acted_ts`; `act_pending` acts on journaled decisions
whose `acted_ts` is still empty and marks each as soon as its action returns.
So a restart acts on journaled-but-not-acted decisions once, and never on acted
ones again. The one window left (the action returned, the process died before
the mark) is closed by the receiver: commands and webhooks get the decision's key
(`FLEET_DECISION_KEY`, the `Idempotency-Key` header) to drop a repeat.

Actuators: `dry-run` (the default: log only), `command` (run a program per
decision, the decision as JSON on stdin and in environment variables) and
`webhook` (POST the decision as JSON).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from fleet.credentials import Credentials
from storage.service_store import JournalEntry, JournalRow, ServiceStore

ACTIONS = ("evict", "release", "add")
"""Journal kinds an actuator carries out; other kinds (`size`, `eviction-pass`) are records."""

log = logging.getLogger("fleet.service.journal")


class ActuatorError(RuntimeError):
    """An action that did not go through; the decision stays unacted and is tried again on the next pass."""


def decision_payload(row: JournalRow, epoch: int | None = None) -> dict:
    return {
        "id": row.id,
        "epoch": epoch,
        "key": row.key,
        "kind": row.kind,
        "card": row.card_key,
        "ts": row.ts,
        "reason": row.reason,
        "detail": row.detail,
    }


class Actuator(Protocol):
    name: str

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        """Carry out one decision journaled under lease `epoch`; raise ActuatorError if it did not go through."""

    def close(self) -> None:
        """Stop whatever is still running; the service calls it on its way out."""


class DryRun:
    """Log the decision and do nothing else."""

    name = "dry-run"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        log.info("dry-run %s %s: %s", row.kind, row.card_key, row.reason)

    def close(self) -> None:
        pass


@dataclass
class Command:
    """Run `argv` once per decision: JSON on stdin, FLEET_DECISION_* in the environment; exit 0 means done."""

    argv: Sequence[str]
    timeout_s: float = 60.0
    name: str = "command"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        env = dict(os.environ)
        env.update(
            {
                "FLEET_LEASE_EPOCH": "" if epoch is None else str(epoch),
                "FLEET_DECISION_ID": str(row.id),
                "FLEET_DECISION_KEY": row.key or "",
                "FLEET_DECISION_KIND": row.kind,
                "FLEET_CARD": row.card_key or "",
                "FLEET_DECISION_TS": str(row.ts),
            }
        )
        try:
            done = subprocess.run(
                list(self.argv), input=json.dumps(decision_payload(row, epoch)).encode(), env=env,
                capture_output=True, timeout=self.timeout_s, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ActuatorError(f"actuator command {self.argv[0]!r}: {err}") from None
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip()[-300:]
            raise ActuatorError(f"actuator command {self.argv[0]!r} exited {done.returncode}: {tail}")

    def close(self) -> None:
        pass


@dataclass
class Webhook:
    """POST each decision as JSON to `url`, with its key as the Idempotency-Key header; any 2xx means done."""

    url: str
    timeout_s: float = 30.0
    auth: Credentials | None = None
    name: str = "webhook"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        body = json.dumps(decision_payload(row, epoch)).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": row.key or str(row.id)}
        if epoch is not None:
            headers["Fleet-Lease-Epoch"] = str(epoch)
        if self.auth is not None:
            headers.update(self.auth.headers())
        req = urllib.request.Request(self.url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 (URL from the operator's config)
                status = resp.status
        except urllib.error.HTTPError as err:
            raise ActuatorError(f"actuator webhook {self.url!r}: HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            raise ActuatorError(f"actuator webhook {self.url!r}: {err}") from None
        if not 200 <= status < 300:
            raise ActuatorError(f"actuator webhook {self.url!r}: HTTP {status}")

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ActOutcome:
    acted: int
    failed: int
    error: str | None = None


class Journal:
    """Journal first, act second; acting is at most once per decision as far as the journal can see."""

    def __init__(self, store: ServiceStore, actuator: Actuator, now: Callable[[], float]):
        self.store = store
        self.actuator = actuator
        self.now = now

    def write(
        self, hour_ts: int, entries: Sequence[JournalEntry], open_cards: dict[str, str], close_cards: Sequence[str],
        retire_cards: Sequence[str],
    ) -> bool:
        return self.store.journal_hour(hour_ts, entries, open_cards, close_cards, retire_cards)

    def act_pending(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome:
        """Act on every journaled, unacted decision in journal order, under lease `epoch`; stop at the first failure
        (order matters) or as soon as `stop()` says so (checked before each action)."""
        acted = 0
        for row in self.store.unacted():
            if stop():
                break
            if row.kind in ACTIONS:
                try:
                    self.actuator.act(row, epoch)
                except ActuatorError as err:
                    log.warning("decision %s not acted: %s", row.key, err)
                    return ActOutcome(acted, 1, str(err))
            if self.store.mark_acted(row.id, int(self.now())):
                acted += row.kind in ACTIONS
        return ActOutcome(acted, 0)
