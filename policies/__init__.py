"""Policies by name: windows, sizing modes and eviction rules, and `resolve`, which turns a policy's settings into
the plug-ins the core calls. A new mode or rule is one file and one line here."""

from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from fleet.core.plugins import EvictionRule, Judgement, PolicyParts, ScoreEstimator, SizingInput, SizingMode
from fleet.core.errors import ConfigError
from fleet.core.forecast import Forecaster
from fleet.core.registry import Registry
from fleet.core.scenario import Policy, format_validation
from policies.admission import Limits, LimitsSettings
from policies.below_median import BelowMedian, BelowMedianSettings
from policies.forecasters import HoltWinters, HoltWintersSettings, Known, LastHour, NoSettings, Seasonal, SeasonalSettings
from policies.held import Held
from policies.hysteresis import ReleaseAfter, ReleaseAfterSettings
from policies.no_eviction import NoEviction, NoEvictionSettings
from policies.scores import DipAware, DipAwareSettings, WindowMean
from policies.steady import Steady
from policies.windows import WINDOWS, window_hours

SIZING_MODES: Registry[SizingMode] = Registry("sizing mode")
SIZING_MODES.register("held", Held())
SIZING_MODES.register("steady", Steady())

Plugin = tuple[type[BaseModel], Callable[[Any], Any]]
"""A plug-in as registered: the settings model it owns, and how it is built from them."""

SCORES: Registry[Plugin] = Registry("score estimator")
SCORES.register("mean", (NoSettings, lambda settings: WindowMean()))
SCORES.register("dip-aware", (DipAwareSettings, lambda settings: DipAware(**settings.model_dump())))

FORECASTERS: Registry[Plugin] = Registry("forecaster")
"""Each forecaster with the settings model it owns (`[policy.forecaster]`), validated when a policy is resolved."""
FORECASTERS.register("known", (NoSettings, lambda settings: Known()))
FORECASTERS.register("last-hour", (NoSettings, lambda settings: LastHour()))
FORECASTERS.register("seasonal", (SeasonalSettings, Seasonal))
FORECASTERS.register("holt-winters", (HoltWintersSettings, HoltWinters))


def build(registry: Registry[Plugin], name: str, settings: dict, where: str):
    """A plug-in built from its own settings; a bad setting is one `ConfigError` naming where it is written."""
    settings_model, make = registry.get(name)
    try:
        own = settings_model.model_validate(settings)
    except ValidationError as err:
        raise ConfigError(f"{where} ({name!r}): {format_validation(err)}") from None
    return make(own)


def forecaster(policy: Policy) -> Forecaster:
    """The forecaster a policy names, built from `[policy.forecaster]`."""
    return build(FORECASTERS, policy.forecast, policy.forecaster, "policy.forecaster")


EVICTION_RULES: Registry[Plugin] = Registry("eviction rule")
"""Each rule with its settings, written beside `rule` in `[policy.eviction]` (below-median's `fraction`)."""
EVICTION_RULES.register("none", (NoEvictionSettings, lambda settings: NoEviction()))
EVICTION_RULES.register("below-median", (BelowMedianSettings, BelowMedian))

ADMISSIONS: Registry[Plugin] = Registry("admission")
"""What lets a rule's candidates go: its settings are written in `[policy.eviction]` beside the rule's."""
ADMISSIONS.register("limits", (LimitsSettings, Limits.of))
ADMISSION = "limits"

HYSTERESES: Registry[Plugin] = Registry("hysteresis")
HYSTERESES.register("release-after", (ReleaseAfterSettings, lambda settings: ReleaseAfter(settings.release_after_hours)))
HYSTERESIS = "release-after"


def _eviction(policy: Policy) -> tuple[EvictionRule, object]:
    """The rule and the admission, each built from its own keys of `[policy.eviction]` (a key neither owns is the
    rule's error, so a typo is named)."""
    ev = policy.eviction
    settings = ev.plugin_settings
    admission_model = ADMISSIONS.get(ADMISSION)[0]
    own = {k: settings.pop(k) for k in list(settings) if k in admission_model.model_fields}
    return (build(EVICTION_RULES, ev.rule, settings, "policy.eviction"),
            build(ADMISSIONS, ADMISSION, own, "policy.eviction"))


def _score(policy: Policy) -> ScoreEstimator:
    """The score estimator, built from its table `[policy.NAME]` (the name with `-` as `_`: `[policy.dip_aware]`);
    every score's table given is validated, so a typo in one the policy does not use is still an error."""
    built = None
    for name in SCORES.names():
        table = getattr(policy, name.replace("-", "_"), None)
        if table or name == policy.score:
            score = build(SCORES, name, table or {}, f"policy.{name.replace('-', '_')}")
            built = score if name == policy.score else built
    return built if built is not None else build(SCORES, policy.score, {}, "policy.score")


def resolve(policy: Policy) -> PolicyParts:
    """The plug-ins a policy names, with its settings bound; an unknown name is one `ConfigError` naming it."""
    rule, admission = _eviction(policy)
    return PolicyParts(
        policy=policy,
        score=_score(policy),
        mode=SIZING_MODES.get(policy.mode),
        rule=rule,
        admission=admission,
        hysteresis=build(HYSTERESES, HYSTERESIS, {"release_after_hours": policy.release_after_hours}, "policy"),
        size_window_hours=window_hours(policy.window),
        evict_window_hours=window_hours(policy.eviction_window),
        forecast=forecaster(policy),
    )


__all__ = [
    "ADMISSIONS",
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
