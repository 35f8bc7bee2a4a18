"""The decision journal: journal first, act second.

Every decision is journaled before anything acts on it: an hour's decisions and
the run-set state they leave are written in one transaction, and only then does
the actuator (`fleet.service.actuators`) see them, one at a time, in journal order.
Each decision has a deterministic key and an `acted_ts`; `act_pending` acts on
journaled decisions whose `acted_ts` is still empty and marks what it carried out
in batches, one transaction each (a failed one is retried or set aside with a
record: `acting.py`). So a restart acts on journaled-but-not-acted decisions, and
never on marked ones again. The window left (actions returned, the process died
before their batch was marked: at most `ACT_BATCH_SIZE` of them) is closed by the
receiver: commands and webhooks get the decision's key (`FLEET_DECISION_KEY`, the
`Idempotency-Key` header), the same on every offer, to drop a repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fleet.core.retry import RetryRules
from fleet.service.acting import ACTIONS, ActOutcome, Acting, ActuatorError, ActuatorStopped
from storage.interfaces import JournalStore
from storage.values import JournalEntry

if TYPE_CHECKING:
    from fleet.service.actuators import Actuator

__all__ = ["ACTIONS", "ActOutcome", "ActuatorError", "ActuatorStopped", "Journal"]


class Journal:
    """Journal first, act second; acting is at most once per decision as far as the journal can see."""

    def __init__(self, store: JournalStore, actuator: Actuator, now: Callable[[], float], rules: RetryRules | None = None,
                 rng=None, wall_seconds: Callable[[float], float] = lambda s: s, simulated: bool = False):
        self.store = store
        self.actuator = actuator
        self.now = now
        self.acting = Acting(store, actuator, now, rules, rng, wall_seconds=wall_seconds, simulated=simulated)
        self.wake: Callable[[], None] | None = None  # set while a separate act job runs the passes (`fleet serve`)

    def write(
        self, hour_ts: int, entries: Sequence[JournalEntry], open_cards: dict[str, str], close_cards: Sequence[str],
        retire_cards: Sequence[str],
    ) -> bool:
        return self.store.journal_hour(hour_ts, entries, open_cards, close_cards, retire_cards)

    def act_pending(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome:
        """Act on every journaled, unacted decision that is due, in journal order per card, under lease `epoch`;
        failures are retried or set aside (`fleet.service.acting`), never raised, and never hold another card."""
        return self.acting.run_pass(stop, epoch)

    def act_soon(self, stop: Callable[[], bool] = lambda: False, epoch: int | None = None) -> ActOutcome | None:
        """What the decide job calls after journaling: with an act job running, wake it and return at once (deciding
        never waits on acting); without one (jobs stepped by hand), act now."""
        if self.wake is not None:
            self.wake()
            return None
        return self.act_pending(stop, epoch)
