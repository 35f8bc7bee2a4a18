"""Policies by name: windows, sizing modes and eviction rules. A new one is one file and one line here."""

from policies.base import EvictionRule, Judgement, SizingInput, SizingMode
from policies.below_median import BelowMedian
from policies.held import Held
from policies.no_eviction import NoEviction
from policies.registry import Registry
from policies.steady import Steady
from policies.windows import WINDOWS, window_hours

SIZING_MODES: Registry[SizingMode] = Registry("sizing mode")
SIZING_MODES.register("held", Held())
SIZING_MODES.register("steady", Steady())

EVICTION_RULES: Registry[EvictionRule] = Registry("eviction rule")
EVICTION_RULES.register("none", NoEviction())
EVICTION_RULES.register("below-median", BelowMedian())

__all__ = [
    "EVICTION_RULES",
    "SIZING_MODES",
    "WINDOWS",
    "EvictionRule",
    "Judgement",
    "Registry",
    "SizingInput",
    "SizingMode",
    "window_hours",
]
