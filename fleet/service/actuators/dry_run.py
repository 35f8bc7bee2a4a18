"""The dry run: each decision logged, nothing else done. The default actuator; it has nothing to set."""

from __future__ import annotations

import logging

from storage.values import JournalRow

log = logging.getLogger("fleet.service.journal")


class DryRun:
    """Log the decision and do nothing else."""

    name = "dry-run"

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        log.info("dry-run %s %s: %s", row.kind, row.card_key, row.reason)

    def close(self) -> None:
        pass

    def check(self) -> tuple[bool, str]:
        return True, self.name
