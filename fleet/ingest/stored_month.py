"""A stored month of a real pool, as a `fleet.core.month.Month` that `fleet.core.replay.replay()` can replay.

The store holds what a real pool gives: measured rates. The month built here takes:
- **measured rate** of a card-hour: the hourly rollup. Where the hour's samples
  carry a busy fraction, tokens per busy second (the card's capacity, so an
  idle card is not taken for a slow one); otherwise the mean tokens/s.
- **true rate** (the truth a real pool never shows): hindsight, the core's one
  rule (`fleet.core.hindsight`): each card's mean measured rate over the month's
  hours it was measured in, as the billing job reads it over the month so far;
  the bill, the ideal operator and the wrong-eviction check read it.
- **hours without samples**: not measured (NaN), left out of the scores' windows,
  as the service's score job leaves them, and out of the truth's mean. A card
  with no sample in the whole span is not in that month's pool.
- **span**: `warmup_hours` of history then `hours` of month, from `start_ts`
  (default: the first stored hour).
- **classes, rents and demand** come from the scenario: the store's cards must
  belong to the scenario's classes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fleet.core.hindsight import hindsight_of_hours
from fleet.core.scenario import ConfigError, Scenario
from fleet.core.month import Month, demand_series, stream
from fleet.presets import demand_file_tps
from storage.busy import measured_tps
from fleet.core.units import HOUR_S

FAR_FUTURE_TS = 4_102_444_800  # 2100-01-01: a telemetry file replayed without a clock has no future bound worth keeping


def month_from_rollups(rollups: pd.DataFrame, scenario: Scenario, start_ts: int | None = None, base_dir: Path | None = None) -> Month:
    """Build the month from hourly rollups (`storage.interfaces.TelemetryStore.hourly_rollups()` rows) and the scenario's market and demand."""
    W, H = scenario.warmup_hours, scenario.hours
    total = W + H
    if rollups.empty:
        raise ConfigError("no stored telemetry to replay")
    first = int(rollups["hour_ts"].min()) if start_ts is None else int(start_ts) - int(start_ts) % HOUR_S
    last = int(rollups["hour_ts"].max())
    covered = (last - first) // HOUR_S + 1
    if covered < total:
        raise ConfigError(
            f"stored telemetry covers {max(covered, 0)} hours from {pd.Timestamp(first, unit='s', tz='UTC'):%Y-%m-%d %H:%M} UTC; "
            f"the scenario needs warmup_hours + hours = {W} + {H} = {total}"
        )
    span = rollups[(rollups["hour_ts"] >= first) & (rollups["hour_ts"] < first + total * HOUR_S)]
    class_names = tuple(c.name for c in scenario.classes)
    strangers = sorted(set(span["card_class"]) - set(class_names))
    if strangers:
        n = int(span.loc[span["card_class"].isin(strangers), "card_key"].nunique())
        raise ConfigError(
            f"{n} stored card(s) belong to class(es) {', '.join(map(repr, strangers))}, not in the scenario's classes "
            f"{list(class_names)}: declare the cards' classes in a pool file (fleet ingest --pool) or use a scenario with those classes"
        )
    cards = span[["card_key", "card_class"]].drop_duplicates("card_key")
    cards = cards.assign(cls=cards["card_class"].map({n: i for i, n in enumerate(class_names)})).sort_values(["cls", "card_key"])
    if cards.empty:
        raise ConfigError("no stored telemetry in the scenario's span")
    row = pd.Series(np.arange(len(cards)), index=cards["card_key"].to_numpy())
    rate = measured_tps(span)
    measured = np.full((len(cards), total), np.nan)
    measured[row[span["card_key"]].to_numpy(), ((span["hour_ts"] - first) // HOUR_S).to_numpy()] = rate
    # An hour without telemetry stays NaN in what the policy measured: its windows leave it out, as the service's
    # score job does (`fleet.core.scores`), and so does the truth, the bill's, read over the month's measured hours.
    cls_idx = cards["cls"].to_numpy(dtype=np.int32)
    hindsight = hindsight_of_hours(measured[:, W:])
    rated = np.array([scenario.classes[i].rated_tps for i in cls_idx], dtype=np.float64)
    rent = np.array([scenario.classes[i].rent_usd_per_month for i in cls_idx], dtype=np.float64)
    demand = demand_series(scenario.demand, H, stream(scenario.seed, "demand"), demand_file_tps(scenario, base_dir))
    return Month(
        hours=H,
        warmup_hours=W,
        class_names=class_names,
        card_class=cls_idx,
        card_ids=cards["card_key"].to_numpy(dtype=object),
        rated_tps=rated,
        true_tps=hindsight,
        rent_usd_per_month=rent,
        true_rate_tps=np.repeat(hindsight.astype(np.float32)[:, None], total, axis=1),
        measured_tps=measured.astype(np.float32),
        demand_tps=demand,
    )


def month_from_store(url: str, scenario: Scenario, start_ts: int | None = None, base_dir: Path | None = None) -> Month:
    """The month stored at database `url` (any SQLAlchemy URL), ready for `replay(scenario, month=...)`."""
    from storage import open_store

    repo = open_store(url, create=True).telemetry
    lo = None if start_ts is None else int(start_ts) - int(start_ts) % HOUR_S
    hi = None if lo is None else lo + (scenario.warmup_hours + scenario.hours) * HOUR_S
    return month_from_rollups(repo.hourly_rollups(lo, hi), scenario, start_ts, base_dir)


def load_telemetry_file(
    path: str | Path,
    scenario: Scenario,
    start_ts: int | None = None,
    fmt: str | None = None,
    base_dir: Path | None = None,
    now_ts: int | None = None,
):
    """The month in a telemetry file and the ingest's report, through a private in-memory store (the same
    ingest, quarantine and rollups as `fleet ingest`). A bad file raises `BadSource` as `fleet ingest` does."""
    rollups, report = telemetry_rollups(path, scenario, fmt, now_ts)
    return month_from_rollups(rollups, scenario, start_ts, base_dir), report


def telemetry_rollups(path: str | Path, scenario: Scenario, fmt: str | None = None, now_ts: int | None = None):
    """The hourly rollups of a telemetry file and the ingest's report, through a private in-memory store. Cards are
    registered on first sight in the class their records name, else in the class the scenario's policy rents when it
    rents one (`Scenario.default_card_class`), else as unassigned (no rent: outside the month)."""
    from fleet.ingest import IngestSettings, ingest_parsed, read_file
    from fleet.ingest.pool import declare_pool
    from storage import open_store

    parsed = read_file(path, fmt)
    repo = open_store("sqlite://", create=True).telemetry
    declare_pool(repo, scenario.classes, {}, 0)
    settings = IngestSettings(now_ts=FAR_FUTURE_TS if now_ts is None else int(now_ts),
                              default_class=scenario.default_card_class or IngestSettings.default_class)
    report = ingest_parsed(repo, parsed, settings)
    return repo.hourly_rollups(), report


def month_from_telemetry_file(path: str | Path, scenario: Scenario, **options) -> Month:
    """The month in a telemetry file (CSV, JSON Lines or Parquet), ready for replay; `options` as `load_telemetry_file`."""
    return load_telemetry_file(path, scenario, **options)[0]
