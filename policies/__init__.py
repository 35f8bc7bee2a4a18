"""Policies by name: sizing modes, windows, score estimators, forecasters, eviction rules, admissions and hysteresis,
each a `Plugin` (its name, the settings model it owns, how it is built) registered once here; and `resolve`, which
turns a policy's settings into the plug-ins the core calls.

A policy names each plug-in at one key (`score`, `mode`, `forecast`, `hysteresis`, `eviction.rule`,
`eviction.admission`) and sets it in a table of its own, under its kind and its name: `[policy.scores.dip-aware]`,
`[policy.modes.NAME]`, `[policy.forecasters.seasonal]`, `[policy.hystereses.release-after]`,
`[policy.eviction.rules.below-median]`, `[policy.eviction.admissions.limits]`. A new plug-in is its module and one
registration line here."""

from fleet.core.plugins import (
    Admission, EvictionRule, Hysteresis, Judgement, PolicyParts, ScoreEstimator, SizingInput, SizingMode,
)
from fleet.core.errors import ConfigError
from fleet.core.forecast import Forecaster
from fleet.core.registry import NoSettings, Plugin, Registry, constant
from fleet.core.scenario import Policy
from policies.admission import Limits, LimitsSettings
from policies.below_median import BelowMedian, BelowMedianSettings
from policies.forecasters import HoltWinters, HoltWintersSettings, Known, LastHour, Seasonal, SeasonalSettings
from policies.held import Held
from policies.hysteresis import ReleaseAfter, ReleaseAfterSettings
from policies.no_eviction import NoEviction, NoEvictionSettings
from policies.scores import DipAware, DipAwareSettings, WindowMean
from policies.steady import Steady
from policies.windows import WINDOWS, window_hours

SIZING_MODES: Registry[SizingMode] = Registry("sizing mode")
SIZING_MODES.register(Plugin("held", NoSettings, constant(Held())))
SIZING_MODES.register(Plugin("steady", NoSettings, constant(Steady())))

SCORES: Registry[ScoreEstimator] = Registry("score estimator")
SCORES.register(Plugin("mean", NoSettings, constant(WindowMean())))
SCORES.register(Plugin("dip-aware", DipAwareSettings, lambda settings: DipAware(**settings.model_dump())))

FORECASTERS: Registry[Forecaster] = Registry("forecaster")
FORECASTERS.register(Plugin("known", NoSettings, constant(Known())))
FORECASTERS.register(Plugin("last-hour", NoSettings, constant(LastHour())))
FORECASTERS.register(Plugin("seasonal", SeasonalSettings, Seasonal))
FORECASTERS.register(Plugin("holt-winters", HoltWintersSettings, HoltWinters))

EVICTION_RULES: Registry[EvictionRule] = Registry("eviction rule")
EVICTION_RULES.register(Plugin("none", NoEvictionSettings, constant(NoEviction())))
EVICTION_RULES.register(Plugin("below-median", BelowMedianSettings, BelowMedian))

ADMISSIONS: Registry[Admission] = Registry("admission")
ADMISSIONS.register(Plugin("limits", LimitsSettings, Limits.of))

HYSTERESES: Registry[Hysteresis] = Registry("hysteresis")
HYSTERESES.register(Plugin("release-after", ReleaseAfterSettings, lambda settings: ReleaseAfter(settings.release_after_hours)))


def chosen(registry: Registry, name: str, tables: dict[str, dict], where: str):
    """The plug-in `name` built from its own table in `where` (`policy.scores`); every other table given there is
    validated too, so a typo in one the policy does not use is still an error."""
    for other, table in tables.items():
        if other != name:
            if other not in registry:
                raise ConfigError(f"{where}.{other}: unknown {registry.kind} {other!r} (known: {', '.join(registry.names())})")
            registry.settings(other, table, f"{where}.{other}")
    return registry.build(name, tables.get(name), f"{where}.{name}")


def forecaster(policy: Policy) -> Forecaster:
    """The forecaster a policy names, built from its table (`[policy.forecasters.NAME]`)."""
    return chosen(FORECASTERS, policy.forecast, policy.forecasters, "policy.forecasters")


def resolve(policy: Policy) -> PolicyParts:
    """The plug-ins a policy names, each built from its own table; an unknown name or a bad setting is one
    `ConfigError` naming it."""
    ev = policy.eviction
    return PolicyParts(
        policy=policy,
        score=chosen(SCORES, policy.score, policy.scores, "policy.scores"),
        mode=chosen(SIZING_MODES, policy.mode, policy.modes, "policy.modes"),
        rule=chosen(EVICTION_RULES, ev.rule, ev.rules, "policy.eviction.rules"),
        admission=chosen(ADMISSIONS, ev.admission, ev.admissions, "policy.eviction.admissions"),
        hysteresis=chosen(HYSTERESES, policy.hysteresis, policy.hystereses, "policy.hystereses"),
        size_window_hours=window_hours(policy.window),
        evict_window_hours=window_hours(policy.eviction_window),
        forecast=forecaster(policy),
    )


__all__ = [
    "ADMISSIONS",
    "Plugin",
    "HYSTERESES",
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
