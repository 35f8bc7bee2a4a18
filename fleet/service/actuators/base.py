"""What every actuator is: the protocol the journal acts through, and the decision as an actuator is handed it."""

from __future__ import annotations

from typing import Protocol

from storage.values import JournalRow


def decision_payload(row: JournalRow, epoch: int | None = None) -> dict:
    """The decision as JSON gives it to a command's stdin and a webhook's body, with the epoch of the lease it is
    acted under."""
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

    def check(self) -> tuple[bool, str]:
        """`fleet serve --check`'s line: (passed, what it says)."""
