"""The demand lines `fleet status`, `fleet explain` and `fleet plan` print: the forecast an hour was sized to beside
the demand it had, and one line whenever the policy knew the demand (a clairvoyant figure)."""

from __future__ import annotations

import math

KNEW_LINE = "the policy knew each hour's demand (forecast = \"known\"): clairvoyant figures"


def _tps(v) -> str | None:
    return f"{float(v):,.0f} tok/s" if v is not None and math.isfinite(float(v)) else None


def forecast_beside_measured(forecast_tps, measured_tps) -> str:
    """`forecast F, measured M (forecast off by ±x%)`, saying which is not there yet."""
    f, m = _tps(forecast_tps), _tps(measured_tps)
    text = f"forecast {f or 'none (nothing measured before it: every card warm)'}, measured {m or 'not yet'}"
    if f and m and float(measured_tps) > 0:
        text += f" (forecast off by {float(forecast_tps) / float(measured_tps) - 1:+.1%})"
    return text
