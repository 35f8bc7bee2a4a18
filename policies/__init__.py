"""Policies by name: windows, sizing modes and eviction rules, and `resolve`, which turns a policy's settings into
the plug-ins the core calls. A new mode or rule is one file and one line here."""

from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from fleet.core.plugins import EvictionRule, Judgement, PolicyParts, ScoreEstimator, SizingInput, SizingMode
from fleet.core.errors import ConfigError
from fleet.core.forecast import Forecaster
from fleet.core.registry import Registry
from fleet.core.scenario import Policy, format_validation
from policies.admission import Limits
from policies.below_median import BelowMedian
from policies.forecasters import HoltWinters, HoltWintersSettings, Known, LastHour, NoSettings, Seasonal, SeasonalSettings
from policies.held import Held
from policies.hysteresis import ReleaseAfter
from policies.no_eviction import NoEviction
from policies.scores import DipAware, WindowMean
from policies.steady import Steady
from policies.windows import WINDOWS, window_hours

SIZING_MODES: Registry[SizingMode] = Registry("sizing mode")
SIZING_MODES.register("held", Held())
SIZING_MODES.register("steady", Steady())

SCORES: Registry[Callable[[Policy], ScoreEstimator]] = Registry("score estimator")
SCORES.register("mean", lambda policy: WindowMean())
SCORES.register("dip-aware", lambda policy: DipAware(**policy.dip_aware.model_dump()))

FORECASTERS: Registry[tuple[type[BaseModel], Callable[[Any], Forecaster]]] = Registry("forecaster")
"""Each forecaster with the settings model it owns (`[policy.forecaster]`), validated when a policy is resolved."""
FORECASTERS.register("known", (NoSettings, lambda settings: Known()))
FORECASTERS.register("last-hour", (NoSettings, lambda settings: LastHour()))
FORECASTERS.register("seasonal", (SeasonalSettings, Seasonal))
FORECASTERS.register("holt-winters", (HoltWintersSettings, HoltWinters))


def forecaster(policy: Policy) -> Forecaster:
    """The forecaster a policy names, built from its own settings; a bad setting is one `ConfigError` naming it."""
    settings_model, build = FORECASTERS.get(policy.forecast)
    try:
        settings = settings_model.model_validate(policy.forecaster)
    except ValidationError as err:
        raise ConfigError(f"policy.forecaster ({policy.forecast!r}): {format_validation(err)}") from None
    return build(settings)


EVICTION_RULES: Registry[EvictionRule] = Registry("eviction rule")
EVICTION_RULES.register("none", NoEviction())
EVICTION_RULES.register("below-median", BelowMedian())


def resolve(policy: Policy) -> PolicyParts:
    """The plug-ins a policy names, with its settings bound; an unknown name is one `ConfigError` naming it."""
    ev = policy.eviction
    return PolicyParts(
        policy=policy,
        score=SCORES.get(policy.score)(policy),
        mode=SIZING_MODES.get(policy.mode),
        rule=EVICTION_RULES.get(ev.rule),
        admission=Limits(ev.breaker_share, ev.disruption_share, ev.drain_hours),
        hysteresis=ReleaseAfter(policy.release_after_hours),
        size_window_hours=window_hours(policy.window),
        evict_window_hours=window_hours(policy.eviction_window),
        forecast=forecaster(policy),
    )


__all__ = [
    "EVICTION_RULES",
    "FORECASTERS",
    "SCORES",
    "SIZING_MODES",
    "WINDOWS",
    "EvictionRule",
    "Judgement",
    "PolicyParts",
    "Registry",
    "SizingInput",
    "SizingMode",
    "resolve",
    "window_hours",
]
