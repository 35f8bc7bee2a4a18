"""The scenario types: card classes, pools, the month's draws, the policy, the checks.

A scenario is plain data: a market of card classes, the lottery and dips a card
rides, the demand, the telemetry noise, a policy and the pass marks of the three
checks. Validation is strict (unknown keys are refused) so a typo is an error, not
a silently ignored setting; a policy's plug-ins' own settings are tables it holds
for them, each validated by its plug-in (`policies.resolve`). A preset and its
`--set` overrides are `fleet.core.preset`'s. Files are read by the shell
(`fleet.presets`); this module only sees their parsed tables.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar, Literal, Sequence

from pydantic import Field, ValidationError, field_validator, model_validator

from fleet.core.errors import ConfigError, format_validation
from fleet.core.latency import Slo, check_promise
from fleet.core.old_keys import OLD_POLICY_KEYS, OLD_POLICY_TABLES, eviction_moved, policy_moved
from fleet.core.serving import Serving  # noqa: F401 - a class's serving table, part of the schema
from fleet.core.tables import Strict

__all__ = ["ConfigError", "format_validation"]


class CardClass(Strict):
    """One class of card: its rated rate and its rent. Presets, the service config and pool files all use it.

    The rated rate is a number (`rated_tps`) or follows from a `[classes.serving]` table (`Serving`): its
    aggregate tokens/s at its batch."""

    name: str = Field(min_length=1)
    rated_tps: float = Field(gt=0)
    rent_usd_per_month: float = Field(gt=0)
    boot_minutes: float = Field(default=0.0, ge=0, le=24 * 60)  # a card added serves only after this; it bills from its start
    serving: Serving | None = None

    @model_validator(mode="before")
    @classmethod
    def _rated_from_serving(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("serving") is None:
            return data
        if data.get("rated_tps") is not None:
            raise ValueError("give rated_tps or a [classes.serving] table, not both")
        try:
            rated = Serving.model_validate(data["serving"]).aggregate_tps
        except ValidationError:
            rated = 1.0  # a stand-in, never used: the `serving` field's own validation reports what is wrong
        return {**data, "rated_tps": rated}


class MarketClass(CardClass):
    """A card class as a month's market offers it: the class and how many cards of it the provider offers."""

    pool_cards: int = Field(ge=0, le=1_000_000)


class PoolCard(Strict):
    """A card declared up front, in the class it belongs to."""

    card_id: str = Field(min_length=1, max_length=200)
    card_class: str = Field(min_length=1)


class Pool(Strict):
    """A real pool's classes, the cards declared up front, and the class of a card first seen without one.

    The `[pool]` table of the service config and a pool file (`fleet ingest --pool`) are this model.
    """

    classes: tuple[CardClass, ...] = Field(min_length=1)
    cards: tuple[PoolCard, ...] = ()
    default_class: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "Pool":
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"class names must be unique, got {names}")
        seen: set[str] = set()
        for c in self.cards:
            if c.card_id in seen:
                raise ValueError(f"card {c.card_id!r} declared twice")
            seen.add(c.card_id)
            if c.card_class not in names:
                raise ValueError(f"card {c.card_id!r} names class {c.card_class!r}, not one of {names}")
        if self.default_class is not None and self.default_class not in names:
            raise ValueError(f"default_class {self.default_class!r} is not one of the classes {names}")
        return self

    def card_classes(self) -> dict[str, str]:
        return {c.card_id: c.card_class for c in self.cards}


class Lottery(Strict):
    """The quality ticket a card draws at boot: true rate = rated × lognormal(mean, sigma)."""

    sigma: float = Field(default=0.2, ge=0, le=2)
    mean: float = Field(default=0.0, ge=-2, le=2)


class Dips(Strict):
    """Silent dips: episodes starting with a per-hour probability, lasting `hours`, cutting the rate by `depth`."""

    start_prob_per_hour: float = Field(default=0.0, ge=0, le=1)
    hours: int = Field(default=6, ge=1, le=720)
    depth: float = Field(default=0.5, ge=0, lt=1)


class Telemetry(Strict):
    """Measurement noise: the relative standard deviation of one hour's measured rate."""

    hour_noise: float = Field(default=0.25, ge=0, le=1)


class Demand(Strict):
    """The hourly demand to serve, in tokens/s: a shape, and the structure real traffic has on top (each off by default).

    Month hour 0 is a Monday at midnight; the `warmup_hours` before it are the demand's history, drawn the same way,
    which a forecaster may read at the month's start.
    """

    shape: Literal["flat", "diurnal", "file"] = "flat"
    avg_tps: float = Field(default=60_000, gt=0)
    peak_to_avg: float = Field(default=2.0, ge=1)
    peak_hour: float = Field(default=14, ge=0, lt=24)
    jitter: float = Field(default=0.0, ge=0, le=1)  # independent hour-to-hour noise (relative σ)
    noise: float = Field(default=0.0, ge=0, le=2)  # σ of log-demand around the shape, persistent: an AR(1) process
    noise_hours: float = Field(default=6.0, gt=0, le=24 * 31)  # the noise's correlation time
    day_to_day: float = Field(default=0.0, ge=0, le=1)  # σ of the daily level's log change (a random walk of days)
    weekend_factor: float = Field(default=1.0, gt=0, le=10)  # Saturday and Sunday against a weekday
    burst_prob_per_hour: float = Field(default=0.0, ge=0, le=1)  # a burst starts in an hour with this probability
    burst_mult: float = Field(default=2.0, ge=1, le=100)  # a burst multiplies demand by this
    burst_hours: int = Field(default=3, ge=1, le=24 * 31)  # a burst lasts this many hours
    file: str | None = None
    max_wait_s: float | None = Field(default=None, gt=0, le=24 * 3600)  # a queue: unserved tokens wait this long, then are lost
    output_tokens_per_request: float | None = Field(default=None, gt=0, le=10_000_000)  # demand as requests: their mean output
    prompt_tokens_per_request: float | None = Field(default=None, ge=0, le=10_000_000)  # and their mean prompt

    @property
    def structured(self) -> bool:
        """Any of the structure on top of the shape is on."""
        return bool(self.noise or self.day_to_day or self.weekend_factor != 1.0 or self.burst_prob_per_hour)

    @model_validator(mode="after")
    def _file_given(self) -> "Demand":
        if self.shape == "file" and not self.file:
            raise ValueError("demand.shape = 'file' needs demand.file")
        return self


class Eviction(Strict):
    """The eviction policy: a rule read through a window, at a cadence, within a monthly share, and the admission
    that lets its candidates go.

    The rule's and the admission's own settings are tables of their own, `[policy.eviction.rules.NAME]` and
    `[policy.eviction.admissions.NAME]`, validated by the plug-in when the policy is resolved (`policies.resolve`),
    so a new plug-in's settings never touch this schema. Keys written beside `rule` the old way are moved there
    (`fleet.core.old_keys`)."""

    rule: str = "none"
    admission: str = "limits"
    window: str | None = None  # the window the rule reads; None reads the policy's window
    cadence_hours: int = Field(default=24, ge=1)
    share: float = Field(default=0.0, ge=0, le=1)
    rules: dict[str, dict[str, Any]] = Field(default_factory=dict)
    admissions: dict[str, dict[str, Any]] = Field(default_factory=dict)

    old_flat_keys: ClassVar[bool] = True  # any other key is an old plug-in key (moved, or refused by its plug-in)

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return eviction_moved(data, set(cls.model_fields), {"rule": "none", "admission": "limits"})

    @field_validator("window", mode="before")
    @classmethod
    def _window_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


ANY_CLASS = "any"
"""`policy.card_class = "any"`: the run set may take cards of every class on the market."""
DEFAULT_FORECAST = "holt-winters"
"""The forecaster a policy uses unless it names one: a real forecaster, never the clairvoyant `known`."""
KNOWN_FORECAST = "known"
DEFAULT_HYSTERESIS = "release-after"
"""The hysteresis a policy uses unless it names one: `release_after_hours` of 1 releases a card at once."""


class Reactive(Strict):
    """The reactive loop: every step, scale up when the backlog or the last step's demand says the plan is short.

    It adds the best spare cards by scored tokens per dollar until the scored capacity covers the last step's demand
    × `headroom` plus the backlog drained within one step, at most `max_adds_per_hour` an hour. It never removes a
    card: the plan releases one it does not want once `cooldown_minutes` have passed since the card was added.
    """

    headroom: float = Field(default=1.2, ge=1, le=5)
    max_adds_per_hour: int = Field(default=16, ge=1, le=100_000)
    cooldown_minutes: int = Field(default=60, ge=0, le=24 * 60)


class Policy(Strict):
    """What the operator controls: the classes it rents, how it scores cards, how it sizes and evicts."""

    card_class: str | tuple[str, ...]  # a class, a list of classes, or "any" (every class on the market)
    window: str = "day"
    score: str = "mean"  # the score estimator (policies.scores): "mean" of the window, or "dip-aware"
    mode: str = "steady"
    headroom: float = Field(default=1.0, ge=0.5, le=5)
    dip_allowance_hours: float = Field(default=0.0, ge=0, le=24)  # capacity held for dips this many hours ahead (0: none)
    hysteresis: str = DEFAULT_HYSTERESIS  # what keeps a card the mode leaves out warm (policies.hysteresis)
    eviction: Eviction = Eviction()
    # The demand forecaster (policies.forecasters): what each hour is sized for, from the demand before it. Only the
    # seed's presets say "known" (each hour's own demand).
    forecast: str = DEFAULT_FORECAST
    forecast_quantile: float | None = Field(default=None, gt=0, lt=1)  # size to forecast × this quantile of recent actual/forecast
    forecast_error_hours: int = Field(default=168, ge=1, le=24 * 31)  # the recent hours those errors are read over
    # Under a promise ([slo]): "promise" sizes, scores and evicts by each card's rate at the promise and adds the
    # slots the first-token percentile needs; "throughput" by its rate alone, as with no promise (the latency check
    # judges both).
    size_to: Literal["promise", "throughput"] = "promise"
    reactive: Reactive | None = None  # the loop within the hour (a clock finer than the hour); none: the plan alone
    cold_start_tps: float | None = Field(default=None, ge=0)  # what an hour is sized for before any demand is seen
    # Each plug-in's own settings: a table of its kind under its name (`[policy.scores.dip-aware]`), validated by the
    # plug-in when the policy is resolved. Old places of these keys are moved here (`fleet.core.old_keys`).
    scores: dict[str, dict[str, Any]] = Field(default_factory=dict)
    modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    forecasters: dict[str, dict[str, Any]] = Field(default_factory=dict)
    hystereses: dict[str, dict[str, Any]] = Field(default_factory=dict)

    old_keys: ClassVar[dict[str, bool]] = {**dict.fromkeys(OLD_POLICY_TABLES, True), **dict.fromkeys(OLD_POLICY_KEYS, False)}

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return policy_moved(data, {"score": "mean", "forecast": DEFAULT_FORECAST, "hysteresis": DEFAULT_HYSTERESIS})

    @field_validator("window", mode="before")
    @classmethod
    def _window_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("forecast_quantile", mode="before")
    @classmethod
    def _no_quantile(cls, v: Any) -> Any:
        return None if isinstance(v, str) and v.strip().lower() == "none" else v

    @property
    def cold_start(self) -> float | None:
        """The level sized for before any demand is seen: the declared one; with a reactive loop and none declared,
        nothing (the loop adds cards from the first step); else None, every card."""
        if self.cold_start_tps is not None:
            return self.cold_start_tps
        return 0.0 if self.reactive is not None else None

    @property
    def knows_demand(self) -> bool:
        return self.forecast == KNOWN_FORECAST

    @field_validator("card_class", mode="before")
    @classmethod
    def _classes(cls, v: Any) -> Any:
        if isinstance(v, list):
            v = tuple(v)
        if isinstance(v, tuple):
            if not all(isinstance(c, str) for c in v):
                raise ValueError("a list of card classes must hold class names")
            if not v or len(set(v)) != len(v):
                raise ValueError("a list of card classes must name each class once")
            return v[0] if len(v) == 1 else v
        return v

    @property
    def eviction_window(self) -> str:
        return self.eviction.window or self.window

    def run_classes(self, market: Sequence[str]) -> tuple[str, ...]:
        """The classes the run set may take cards of, in the market's order."""
        if self.card_class == ANY_CLASS:
            return tuple(market)
        wanted = (self.card_class,) if isinstance(self.card_class, str) else tuple(self.card_class)
        return tuple(c for c in market if c in wanted)

    @property
    def class_label(self) -> str:
        """How figures and tables name the classes rented: one name, "any", or names joined by "+"."""
        return self.card_class if isinstance(self.card_class, str) else "+".join(self.card_class)

    def unknown_classes(self, market: Sequence[str]) -> list[str]:
        """Classes the policy names that the market does not have."""
        if self.card_class == ANY_CLASS:
            return []
        wanted = (self.card_class,) if isinstance(self.card_class, str) else tuple(self.card_class)
        return [c for c in wanted if c not in market]


STEP_MINUTES = (1, 5, 10, 15, 30, 60)
"""The steps a month may run at: each divides the hour."""


class Checks(Strict):
    """Pass marks of the checks (the fourth, latency, only under a promise)."""

    max_unmet_share: float = Field(default=0.005, ge=0, le=1)
    min_convergence: float = Field(default=0.90, ge=0)
    max_wrong_evictions: int = Field(default=0, ge=0)
    latency_share: float = Field(default=0.99, ge=0, le=1)  # under a promise: delivered tokens within it


class Scenario(Strict):
    """One month of one pool under one policy."""

    name: str = "custom"
    story: str = ""
    fix_story: str = ""
    seed: int = Field(default=0, ge=0)
    hours: int = Field(default=720, ge=1, le=24 * 366)
    warmup_hours: int = Field(default=168, ge=1, le=24 * 366)
    classes: tuple[MarketClass, ...] = Field(min_length=1)
    lottery: Lottery = Lottery()
    dips: Dips = Dips()
    telemetry: Telemetry = Telemetry()
    demand: Demand = Demand()
    policy: Policy
    checks: Checks = Checks()
    slo: Slo | None = None  # a promise to the users on stream speed and first token; none: the fluid model
    # The clock: the month's steps within the hour (demand, the queue, the reactive loop) and the market's billing
    # period (None: by the step). 60 and no queue and no reactive loop: the hourly model, as the presets have it.
    step_minutes: int = 60
    billing_minutes: int | None = None

    @field_validator("step_minutes")
    @classmethod
    def _step_divides_hour(cls, v: int) -> int:
        if v not in STEP_MINUTES:
            raise ValueError(f"step_minutes = {v}: a step must divide the hour, one of {', '.join(map(str, STEP_MINUTES))}")
        return v

    @property
    def fine(self) -> bool:
        """Whether the month runs the within-hour model (`fleet.core.traffic`): a finer step, a queue or a reactive loop."""
        return self.step_minutes != 60 or self.demand.max_wait_s is not None or self.policy.reactive is not None

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"card class names must be unique, got {names}")
        if ANY_CLASS in names:
            raise ValueError(f"a card class may not be named {ANY_CLASS!r}: policy.card_class = {ANY_CLASS!r} means every class")
        if self.policy.unknown_classes(names):
            raise ValueError(f"policy.card_class {self.policy.card_class!r} is not one of the classes {names} (or 'any')")
        if self.billing_minutes is not None and (60 % self.billing_minutes or self.billing_minutes % self.step_minutes):
            raise ValueError(f"billing_minutes = {self.billing_minutes}: must divide the hour and be whole steps of "
                             f"step_minutes = {self.step_minutes}")
        if self.slo is not None:
            check_promise(self.slo, [self.card_class(c) for c in self.policy.run_classes(names)], self.demand)
        return self

    def card_class(self, name: str) -> MarketClass:
        return next(c for c in self.classes if c.name == name)

    @property
    def default_card_class(self) -> str | None:
        """The class of a card whose telemetry names none: the one class the policy rents, else none can be assumed
        (`policy.card_class` may be a list of classes or "any")."""
        rented = self.policy.run_classes([c.name for c in self.classes])
        return rented[0] if len(rented) == 1 else None


def deep_merge(base: dict, over: dict) -> dict:
    """Return `base` with `over` merged in, tables merged key by key, everything else replaced."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def build_scenario(raw: dict, source: str) -> Scenario:
    try:
        return Scenario.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"{source}: {format_validation(err)}") from None


def budget_cards(share: float, pool_cards: int) -> int:
    """The month's eviction budget: the share of the pool, rounded down (a share never exceeded)."""
    return int(math.floor(share * pool_cards + 1e-9))


def budget_left(share: float, pool_cards: int, evicted: int) -> int:
    """Evictions the month's budget still allows after `evicted` of them."""
    return max(0, budget_cards(share, pool_cards) - int(evicted))
