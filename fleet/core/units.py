"""Units the whole project shares: the hour in seconds, the time with no end, a time as it is printed, and a
duration in seconds read from a setting."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from fleet.core.errors import ConfigError

HOUR_S = 3600
"""Seconds in an hour: the month's step, the store's hour buckets, the service's clock."""

NO_END_TS = 2**62
"""A time after every month's end: the open upper bound of a read over the store's times (`-NO_END_TS` the open
lower one), far inside a 64-bit integer so a database's BIGINT binds it."""


def iso_minute(ts: float) -> str:
    """A time as the commands and the log print it: UTC, to the minute (`2026-01-01T00:00Z`)."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def seconds_setting(name: str, raw: str | None, default_s: float, *, what: str, allow_zero: bool = True,
                    error: type[ConfigError] = ConfigError) -> float:
    """A duration given in seconds as text (an environment variable's value): `default_s` when unset or blank, else
    a finite number of at least 0 (above 0 unless `allow_zero`); anything else is one `error` naming the setting."""
    if raw is None or not raw.strip():
        return default_s
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and (seconds >= 0 if allow_zero else seconds > 0)):
        bound = "of at least 0" if allow_zero else "above 0"
        raise error(f"{name} {raw!r}: expected {what} in seconds, a number {bound}")
    return seconds
