"""The grid a comparison replays: its axes, one point of it (`Combo`), and how a grid is expanded.

A combination is a policy's choices (and, under a promise, the promise); `overrides` puts it onto a preset as the
`--set` lines `fleet replay` takes, so a row of a table can be replayed as is.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from fleet.core.scenario import DEFAULT_FORECAST, KNOWN_FORECAST, Scenario

AXES = ("window", "size_window", "share", "mode", "headroom", "card_class", "score", "forecast", "forecast_quantile",
        "size_to", "stream_tps", "ttft_ms")
"""The grid's axes, in the order combinations are expanded and shown. `window` is the window the
eviction rule judges cards through; `size_window` the one the sizing score reads; `score` the estimator;
`forecast` the demand forecaster and `forecast_quantile` the quantile of its errors sized for (None: none);
`size_to` what a policy sizes to under a promise, `stream_tps` and `ttft_ms` the promise (None: none)."""

DEFAULT_EVICTION_WINDOWS = ("day", "week")
DEFAULT_SHARES = (0.05, 0.1)
"""Where the preset's eviction rule is on, the recommendation also tries it through these windows at these
shares; eviction off (share 0) is always on the grid."""


@dataclass(frozen=True, order=True)
class Combo:
    """One point of the grid: the policy choices a month is replayed under."""

    window: str  # the eviction rule's window
    size_window: str  # the sizing window
    share: float
    mode: str
    headroom: float
    card_class: str | tuple[str, ...]
    score: str = "mean"
    forecast: str = DEFAULT_FORECAST
    forecast_quantile: float | None = None
    size_to: str = "promise"
    stream_tps: float | None = None
    ttft_ms: float | None = None

    @property
    def promised(self) -> bool:
        return self.stream_tps is not None or self.ttft_ms is not None

    @property
    def knows_demand(self) -> bool:
        return self.forecast == KNOWN_FORECAST

    def overrides(self) -> list[str]:
        """The `KEY=VALUE` overrides that put this combination onto a preset (`fleet replay -p P --set ...`)."""
        classes = self.card_class if isinstance(self.card_class, str) else list(self.card_class)
        return [
            f"policy.eviction.window={json.dumps(self.window)}",
            f"policy.window={json.dumps(self.size_window)}",
            f"policy.eviction.share={self.share!r}",
            f"policy.mode={json.dumps(self.mode)}",
            f"policy.headroom={self.headroom!r}",
            f"policy.card_class={json.dumps(classes)}",
            f"policy.score={json.dumps(self.score)}",
            f"policy.forecast={json.dumps(self.forecast)}",
            f"policy.forecast_quantile={'none' if self.forecast_quantile is None else repr(self.forecast_quantile)}",
            f"policy.size_to={json.dumps(self.size_to)}",
            *[f"slo.{k}={v!r}" for k, v in (("stream_tps", self.stream_tps), ("ttft_ms", self.ttft_ms)) if v is not None],
        ]

    @property
    def class_label(self) -> str:
        return self.card_class if isinstance(self.card_class, str) else "+".join(self.card_class)

    def label(self, axes: Iterable[str] = AXES) -> str:
        parts = {
            "window": f"{self.window} eviction window",
            "size_window": f"{self.size_window} sizing window",
            "share": f"share {self.share:g}",
            "mode": f"{self.mode} mode",
            "headroom": f"headroom {self.headroom:g}",
            "card_class": f"{self.class_label} cards",
            "score": f"{self.score} score",
            "forecast": "demand known" if self.knows_demand else f"{self.forecast} forecast",
            "forecast_quantile": "" if self.knows_demand else
            "no error margin" if self.forecast_quantile is None else f"error quantile {self.forecast_quantile:g}",
            "size_to": f"sized to {self.size_to}" if self.promised else "",
            "stream_tps": "" if self.stream_tps is None else f"{self.stream_tps:g} tok/s a stream",
            "ttft_ms": "" if self.ttft_ms is None else f"first token within {self.ttft_ms:g} ms",
        }
        return ", ".join(parts[a] for a in axes if parts[a])


def combo_of(scenario: Scenario) -> Combo:
    """The grid point a scenario's policy sits on."""
    p = scenario.policy
    slo = scenario.slo
    return Combo(str(p.eviction_window), str(p.window), float(p.eviction.share), p.mode, float(p.headroom), p.card_class, p.score,
                 p.forecast, p.forecast_quantile, p.size_to, None if slo is None else slo.stream_tps,
                 None if slo is None else slo.ttft_ms)


def _unique(values: Sequence) -> tuple:
    return tuple(dict.fromkeys(values))


_FLOAT_AXES = ("share", "headroom", "stream_tps", "ttft_ms", "forecast_quantile")


def expand_grid(base: Scenario, **axes: Sequence | None) -> list[Combo]:
    """Every combination of the axes given (keyword per `AXES` name, a list of values each); an axis not given keeps
    the base scenario's value. Combinations come in `AXES` order, the last axis varying fastest."""
    unknown = sorted(set(axes) - set(AXES))
    if unknown:
        raise TypeError(f"expand_grid: no axis {', '.join(unknown)}")
    own = combo_of(base)

    def values(axis: str) -> tuple:
        given = axes.get(axis)
        if not given:
            return (getattr(own, axis),)
        return _unique(None if v is None else float(v) for v in given) if axis in _FLOAT_AXES else _unique(given)

    return [Combo(*point) for point in itertools.product(*(values(a) for a in AXES))]


def distinct(combos: Sequence[Combo]) -> list[Combo]:
    """The combinations that replay differently: with eviction off (share 0) the eviction window changes nothing, and a
    policy that knows the demand has no forecast errors to size a margin for."""
    seen, out = set(), []
    for c in combos:
        key = replace(c, window="") if c.share == 0 else c
        key = replace(key, forecast_quantile=None) if c.knows_demand else key
        key = replace(key, size_to="promise") if not c.promised else key  # with no promise both size to throughput
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def default_grid_axes(base: Scenario, evicting: bool, scores: Sequence[str], modes: Sequence[str]) -> dict[str, tuple]:
    """The grid a recommendation searches on every axis not given (headroom is searched, not gridded).

    Every score estimator and sizing mode, every card class on the market and `any` of
    them where there are several; eviction off, and where the preset's rule is on, that
    rule through `DEFAULT_EVICTION_WINDOWS` at `DEFAULT_SHARES`.
    """
    own = combo_of(base)
    classes = tuple(c.name for c in base.classes)
    return {
        "window": DEFAULT_EVICTION_WINDOWS if evicting else (own.window,),
        "size_window": (own.size_window,),
        "share": (0.0, *DEFAULT_SHARES) if evicting else (0.0,),
        "mode": tuple(modes),
        "card_class": classes + (("any",) if len(classes) > 1 else ()),
        "score": tuple(scores),
    }
