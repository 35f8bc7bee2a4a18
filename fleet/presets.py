"""Presets and scenario files, read from disk: the shell's side of the core's scenario types.

The core sees parsed tables and arrays only; reading TOML files, a `file` demand's
CSV and resolving a policy's plug-ins by name happen here, once, before the core runs.
"""

from __future__ import annotations

import copy
import logging
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from fleet.core.errors import ConfigError
from fleet.core.month import Month, draw_month
from fleet.core.replay import MonthResult, replay
from fleet.core.errors import reworded
from fleet.core.preset import Preset, apply_override
from fleet.core.scenario import Scenario, deep_merge

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def read_toml(path: Path, where: str) -> dict:
    """A TOML file as a dict; any reason it cannot be read is one `ConfigError` naming `where`."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a folder") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{where}: not valid TOML ({err})") from None
    except OSError as err:
        raise ConfigError(f"{where}: {err.strerror}") from None


def load_preset(name_or_path: str) -> Preset:
    """Load a preset by name (from `presets/`) or by path to a TOML file; its policy's names are checked here."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" or path.exists() or "/" in name_or_path):
        path = PRESETS_DIR / f"{name_or_path}.toml"
        if not path.exists():
            known = ", ".join(preset_names()) or "none"
            raise ConfigError(f"unknown preset {name_or_path!r} (known: {known})")
    if path.is_dir():
        raise ConfigError(f"preset file {str(path)!r}: is a directory, not a TOML file")
    if not path.is_file():
        raise ConfigError(f"preset file {str(path)!r}: not found")
    where = f"preset file {str(path)!r}"
    preset = Preset(read_toml(path, where), where, path)
    try:
        resolve_policy(preset.scenario)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return preset


def resolve_policy(scenario: Scenario):
    """The scenario's policy resolved into its plug-ins (`policies.resolve`)."""
    import policies

    return policies.resolve(scenario.policy)


def read_demand_file(path: str, hours: int, base_dir: Path | None, step_minutes: int = 60) -> np.ndarray:
    """Demand from a CSV with a `demand_tps` column, resampled to the month's step: one row an hour as written, or
    rows keyed by `minute` (or `hour`) from the month's start at their own even spacing (a 10-minute trace, say).

    A row with no `demand_tps` is a gap: it is filled from its neighbours and the count is logged, so a trace with
    a missing window still replays and says so. Rows that are not evenly spaced, or a negative value, are refused.
    """
    import pandas as pd

    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    where = f"demand file {str(p)!r}"
    try:
        frame = pd.read_csv(p, comment="#")
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{where}: {' '.join(str(err).split())}") from None
    if "demand_tps" not in frame.columns:
        raise ConfigError(f"{where}: no demand_tps column")
    values = pd.to_numeric(frame["demand_tps"], errors="coerce").to_numpy(dtype=np.float64)
    spacing = _row_minutes(frame, where)
    if np.any(values < 0) or np.any(np.isinf(values)):
        raise ConfigError(f"{where}: demand_tps must be finite and non-negative (row {int(np.flatnonzero(~(values >= 0) & ~np.isnan(values))[0]) + 1})")
    gaps = np.isnan(values)
    if gaps.all():
        raise ConfigError(f"{where}: no row gives a demand_tps")
    if gaps.any():
        rows = np.arange(values.size)
        values = np.interp(rows, rows[~gaps], values[~gaps])
        logging.getLogger("fleet.demand").warning("%s: %d of %d rows have no demand_tps; filled from their neighbours",
                                                  where, int(gaps.sum()), values.size)
    return resample_to_step(values, spacing, step_minutes, hours * 60 // step_minutes, where)


def _row_minutes(frame, where: str) -> int:
    """The rows' spacing in minutes: from a `minute` or `hour` key (which must rise evenly from any start), or an
    hour a row when the file has neither."""
    import pandas as pd

    key = "minute" if "minute" in frame.columns else "hour" if "hour" in frame.columns else None
    if key is None:
        return 60
    raw = pd.to_numeric(frame[key], errors="coerce").to_numpy(dtype=np.float64)
    if raw.size == 0 or not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
        raise ConfigError(f"{where}: every {key} must be a whole number")
    step = np.diff(raw)
    if raw.size > 1 and (step[0] <= 0 or np.any(step != step[0])):
        bad = int(np.flatnonzero(step != step[0])[0]) + 2 if step[0] > 0 else 2
        raise ConfigError(f"{where}: rows are not evenly spaced by {key} (row {bad} breaks the spacing)")
    spacing = int(step[0]) if raw.size > 1 else 1
    return spacing * (60 if key == "hour" else 1)


def resample_to_step(values: np.ndarray, spacing_minutes: int, step_minutes: int, steps: int, where: str) -> np.ndarray:
    """Rows `spacing_minutes` apart as `steps` steps of `step_minutes`: a step's mean of the rows in it when rows are
    finer, each row held over its steps when they are coarser."""
    if step_minutes % spacing_minutes == 0:
        per = step_minutes // spacing_minutes
        if values.size < steps * per:
            raise ConfigError(f"{where}: {values.size} rows of {spacing_minutes} minutes cover {values.size * spacing_minutes // 60} hours, "
                              f"the month needs {steps * step_minutes // 60}")
        return values[: steps * per].reshape(steps, per).mean(axis=1)
    if spacing_minutes % step_minutes == 0:
        per = spacing_minutes // step_minutes
        need = -(-steps // per)
        if values.size < need:
            raise ConfigError(f"{where}: {values.size} rows of {spacing_minutes} minutes cover {values.size * spacing_minutes // 60} hours, "
                              f"the month needs {steps * step_minutes // 60}")
        return np.repeat(values[:need], per)[:steps]
    raise ConfigError(f"{where}: rows {spacing_minutes} minutes apart do not fit the month's {step_minutes}-minute step")


def demand_file_tps(scenario: Scenario, base_dir: Path | None = None) -> np.ndarray | None:
    """The scenario's `file` demand as read from disk, or None for a drawn demand."""
    if scenario.demand.shape != "file":
        return None
    return read_demand_file(scenario.demand.file or "", scenario.hours, base_dir, scenario.step_minutes)


def draw(scenario: Scenario, base_dir: Path | None = None) -> Month:
    """The scenario's month, its demand file (if any) read from `base_dir`."""
    return draw_month(scenario, demand_file_tps(scenario, base_dir))


def replay_scenario(scenario: Scenario, month: Month | None = None, base_dir: Path | None = None, ideal_usd=None) -> MonthResult:
    """Resolve the scenario's policy, draw its month unless given, and replay it."""
    parts = resolve_policy(scenario)
    return replay(scenario, parts, month if month is not None else draw(scenario, base_dir), ideal_usd=ideal_usd)


def resolve_scenario(preset: Preset, fix: bool = False, overrides: list[str] | None = None, seed: int | None = None) -> Scenario:
    """The scenario to replay (`Preset.resolve`); when an override makes it invalid, the error names that `--set`
    and what is wrong with its value, not the preset file."""
    overrides = list(overrides or [])
    try:
        scenario = preset.resolve(fix=fix, overrides=overrides, seed=seed)
    except ConfigError as whole:
        if not overrides:
            raise
        raw = deep_merge(preset.raw, preset.fix_raw) if fix else copy.deepcopy(preset.raw)
        for assignment in overrides:  # the first override after which the scenario no longer holds
            raw = apply_override(raw, assignment)
            try:
                Scenario.model_validate(raw)
            except ValidationError as err:
                raise ConfigError(f"--set {assignment}: {_refusal(err)}") from None
        raise whole
    if overrides:  # a name the policy's plug-ins do not know (a window, a mode) is blamed on the --set too
        try:
            resolve_policy(scenario)
        except ConfigError as err:
            for i, assignment in enumerate(overrides):
                try:
                    resolve_policy(preset.resolve(fix=fix, overrides=overrides[: i + 1], seed=seed))
                except ConfigError:
                    raise ConfigError(f"--set {assignment}: {err}") from None
            raise
    return scenario


def _refusal(err: ValidationError) -> str:
    """What pydantic found wrong, once: an error on a table because an item inside it failed is left out."""
    found = err.errors()
    locs = [tuple(e["loc"]) for e in found]
    kept = [e for e, loc in zip(found, locs) if not any(len(o) > len(loc) and o[: len(loc)] == loc for o in locs)]
    parts = []
    for e in kept:
        msg = reworded(e["msg"].removeprefix("Value error, "))
        if e["type"] not in ("value_error", "extra_forbidden") and isinstance(e.get("input"), (str, int, float, bool)):
            msg += f", got {e['input']!r}"
        parts.append(msg)
    return "; ".join(parts)


@dataclass(frozen=True)
class StoredSpan:
    """How a stored month's hours are split between warm-up and the month replayed."""

    stored_hours: int | None  # hours from the first stored hour to the last (None: not measured, the store held enough)
    warmup_hours: int
    hours: int
    asked_warmup_hours: int  # what the scenario asks
    asked_hours: int

    @property
    def is_short(self) -> bool:
        return self.stored_hours is not None and self.stored_hours < self.asked_warmup_hours + self.asked_hours

    def describe(self) -> str:
        if not self.is_short:
            return f"{self.hours} hours after a warm-up of {self.warmup_hours}"
        return (f"{self.hours} hours after a warm-up of {self.warmup_hours}, all the store holds "
                f"({self.stored_hours} hours; the preset asks {self.asked_warmup_hours} + {self.asked_hours})")


def fit_stored_span(scenario: Scenario, stored_hours: int) -> tuple[Scenario, StoredSpan]:
    """The scenario cut to a stored month shorter than its warm-up + hours: every stored hour is replayed but the
    warm-up, which takes what is there beyond a full month, and never less than the longest history the policy's
    scores read (so every score is whole at the first hour)."""
    W, H = scenario.warmup_hours, scenario.hours
    if stored_hours >= W + H:
        return scenario, StoredSpan(stored_hours, W, H, W, H)
    parts = resolve_policy(scenario)
    needed = parts.score.history_hours(parts.size_window_hours)
    if parts.evicts:
        needed = max(needed, parts.evict_window_hours)
    if stored_hours <= needed:
        raise ConfigError(
            f"stored telemetry covers {max(stored_hours, 0)} hours; the policy's scores read {needed} hours of history "
            f"before the first hour replayed, so at least {needed + 1} are needed"
        )
    warmup = min(W, max(needed, stored_hours - H))
    fitted = scenario.model_copy(update={"warmup_hours": warmup, "hours": stored_hours - warmup})
    return fitted, StoredSpan(stored_hours, warmup, stored_hours - warmup, W, H)
