"""The convergence no plan set before the hour can beat when the demand's hour-to-hour noise is independent.

A demand with `jitter` σ is each hour's level times (1 + σZ), Z standard normal and drawn afresh every hour
(`fleet.core.month.draw_demand`). No forecast sees Z: a plan that knew everything else (the shape, the trend, every
card's true rate) still has to hold capacity (1 + x) × the hour's level, with x the least headroom whose expected
shortfall keeps unmet demand under the capacity mark: σ · L(x/σ) = mark, where L(k) = φ(k) − k(1 − Φ(k)) is the
normal's loss function. The same x in every hour is the cheapest way to get there (each hour's shortfall and rent
scale with its level alike). The ideal operator, told each hour, holds exactly the hour's demand, whose mean is the
level, so the month converges at most at 1 / (1 + x), in the fluid of one card rate. Whole cards move both bills by
up to a card an hour; the lottery and the dips only take more from the plan.

Pure: a noise and a mark in, a frozen value out.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.optimize import brentq
from scipy.stats import norm


@dataclass(frozen=True)
class NoiseCeiling:
    """What independent hour-to-hour noise alone costs a plan set before the hour."""

    jitter: float  # the noise's relative σ
    max_unmet_share: float  # the capacity mark the plan keeps
    min_convergence: float  # the convergence mark
    headroom: float  # 1 + x: the least capacity over the hour's level that keeps the capacity mark
    convergence: float  # 1 / headroom: the most the month can converge against the ideal

    @property
    def binds(self) -> bool:
        """Whether no plan set before the hour passes capacity and convergence together."""
        return self.convergence < self.min_convergence - 1e-12

    def as_dict(self) -> dict:
        return {"jitter": self.jitter, "max_unmet_share": self.max_unmet_share, "min_convergence": self.min_convergence,
                "headroom": self.headroom, "convergence": self.convergence, "binds": self.binds}


def _expected_shortfall(x: float, jitter: float) -> float:
    """E[(σZ − x)+]: the demand over a capacity (1 + x) × the level, as a share of the level."""
    k = x / jitter
    return jitter * (float(norm.pdf(k)) - k * float(norm.sf(k)))


def noise_ceiling(jitter: float, max_unmet_share: float, min_convergence: float) -> NoiseCeiling | None:
    """The least headroom keeping unmet demand at `max_unmet_share` against noise `jitter`, and the convergence it
    caps; None with no noise (nothing to cap) or a mark the noise never reaches (no headroom needed). A mark of 0
    against any noise takes every card there is: convergence 0."""
    if jitter <= 0 or _expected_shortfall(0.0, jitter) <= max_unmet_share:
        return None
    if max_unmet_share <= 0:
        return NoiseCeiling(float(jitter), 0.0, float(min_convergence), float("inf"), 0.0)
    x = brentq(lambda v: _expected_shortfall(v, jitter) - max_unmet_share, 0.0, 40.0 * jitter, xtol=1e-12)
    return NoiseCeiling(float(jitter), float(max_unmet_share), float(min_convergence), 1.0 + x, 1.0 / (1.0 + x))
