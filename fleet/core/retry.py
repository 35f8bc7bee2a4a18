"""What becomes of an action after each try: done, tried again later, set aside, or expired.

Pure: the time and the random draw are passed in, so the same tries give the same
schedule in a test as in the service. As Karpenter's disruption queue does, a
transient failure is retried with exponential backoff and jitter until a
retry budget (`max_retry_s` from the first try) runs out; a permanent one is set
aside once its tries (`max_tries`) are spent; and an action whose hour passed
more than `expire_after_s` ago is not carried out late at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Callable

from fleet.core.units import HOUR_S


class Failure(StrEnum):
    """How an action failed, classified once where it failed (by the actuator): the set-aside record stores its text."""

    TRANSIENT = "transient"  # tried again after a backoff, within the retry budget
    PERMANENT = "permanent"  # set aside once the action's tries are spent


TRANSIENT, PERMANENT = Failure.TRANSIENT, Failure.PERMANENT


class NextStep(Enum):
    """What becomes of an action after a failed try."""

    RETRY = "retry"  # tried again at `Tries.next_ts`
    SET_ASIDE = "set-aside"  # never carried out: an `act-failed` record closes it


@dataclass(frozen=True)
class RetryRules:
    """The `[actuator]` settings that bound retries, in seconds of the service's clock."""

    max_retry_s: float = 900.0
    expire_after_s: float = 6.0 * HOUR_S
    first_backoff_s: float = 1.0
    max_backoff_s: float = 120.0


@dataclass(frozen=True)
class Tries:
    """An action's failed tries so far: how many, the first one's time, and when it may be tried again."""

    count: int
    first_ts: float
    next_ts: float
    last_error: str = ""


@dataclass(frozen=True)
class Verdict:
    """The next step after a failed try, with the tries so far (a retry waits until `tries.next_ts`) and, for an
    action set aside, the reason."""

    step: NextStep
    tries: Tries
    reason: str = ""


def backoff_s(rules: RetryRules, count: int, draw: float) -> float:
    """The wait after the `count`-th failed try: doubling from `first_backoff_s` up to `max_backoff_s`, with full
    jitter's upper half (`draw` in [0, 1)), so many actions failing at once do not all come back together."""
    base = min(rules.max_backoff_s, rules.first_backoff_s * 2.0 ** max(0, count - 1))
    return base * (0.5 + 0.5 * draw)


def after_failure(rules: RetryRules, before: Tries | None, outcome: Failure, error: str, now_ts: float, draw: float,
                  max_tries: int = 1) -> Verdict:
    """The next step for an action whose try at `now_ts` failed with `outcome`."""
    count = 1 if before is None else before.count + 1
    first = now_ts if before is None else before.first_ts
    if outcome == PERMANENT and count >= max_tries:
        return Verdict(NextStep.SET_ASIDE, Tries(count, first, now_ts, error), "permanent failure")
    nxt = now_ts + backoff_s(rules, count, draw)
    if nxt - first > rules.max_retry_s:
        return Verdict(NextStep.SET_ASIDE, Tries(count, first, now_ts, error),
                       f"still failing after {rules.max_retry_s:g} s of retries")
    return Verdict(NextStep.RETRY, Tries(count, first, nxt, error))


def expired(rules: RetryRules, hour_ts: int, now_ts: float, hour_s: int = HOUR_S,
            late_s: Callable[[float], float] = lambda s: s) -> bool:
    """Whether the decision of the hour starting `hour_ts` is too late to carry out at `now_ts`: its hour ended more
    than `expire_after_s` ago (0 never expires); `late_s` turns clock seconds into the seconds that are judged."""
    return rules.expire_after_s > 0 and late_s(now_ts - (hour_ts + hour_s)) > rules.expire_after_s
