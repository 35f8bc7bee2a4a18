"""What vLLM measures beside a card's rate, from Prometheus: the mean batch, the time per output token, the time to
first token and the share of first tokens within the promise's, as telemetry's serving columns.

- `batch_mean`: the mean of `vllm:num_requests_running` over the window (the streams in each decode step).
- `tpot_s`: the histogram `vllm:time_per_output_token_seconds` as its sum's rate over its count's: the mean step
  a stream saw in the window.
- `ttft_s`: the same of `vllm:time_to_first_token_seconds`; and `ttft_ok_share`, where its buckets are there and
  `ttft_within_s` is given, the share of first tokens within it, read off the cumulative buckets with a straight
  line inside the bucket that holds it (as `histogram_quantile` reads the other way).

Each is a range query of its own at the rate query's start, end and step, joined to the rate's points on (card,
ts). A histogram whose sum grew while its count did not (or has no count) is no measurement: the record is
quarantined as `no-count:tpot_s` (or `ttft_s`), and the other records stand. A window with neither (no tokens) has
no value.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from fleet.ingest.formats import BadSource

SERVING_QUERY_KEYS = ("batch_mean", "tpot_sum", "tpot_count", "ttft_sum", "ttft_count", "ttft_bucket")


@dataclass(frozen=True)
class ServingAsk:
    """What a pull asks of the serving stack: each column's range query, and the first-token time whose share is
    read off the buckets (None: no share)."""

    queries: dict[str, str]
    ttft_within_s: float | None = None


def serving_ask(by: Sequence[str], window: str = "1m", batch_window: str | None = None,
                ttft_within_s: float | None = None) -> ServingAsk:
    """The serving columns' queries, summed per card (`by`: the labels naming a card). The batch is a gauge's mean
    over `batch_window` (default: `window`)."""
    return ServingAsk(serving_queries(by, window, batch_window), ttft_within_s)


def serving_queries(by: Sequence[str], window: str = "1m", batch_window: str | None = None) -> dict[str, str]:
    """The range queries of the serving columns, summed per card (`by`: the labels naming a card)."""
    labels = ", ".join(by)

    def rate(metric: str, extra: str = "") -> str:
        return f"sum by ({labels}{extra}) (rate({metric}[{window}]))"

    return {
        "batch_mean": f"sum by ({labels}) (avg_over_time(vllm:num_requests_running[{batch_window or window}]))",
        "tpot_sum": rate("vllm:time_per_output_token_seconds_sum"),
        "tpot_count": rate("vllm:time_per_output_token_seconds_count"),
        "ttft_sum": rate("vllm:time_to_first_token_seconds_sum"),
        "ttft_count": rate("vllm:time_to_first_token_seconds_count"),
        "ttft_bucket": rate("vllm:time_to_first_token_seconds_bucket", ", le"),
    }


def share_within(buckets: dict[float, float], within_s: float) -> float:
    """The share of a histogram's observations at or below `within_s`, from its cumulative buckets (upper bound ->
    count, +Inf among them): straight between the bounds around it; NaN with no observations or no +Inf bucket."""
    total = buckets.get(math.inf)
    if not total or not total > 0:
        return math.nan
    lo, below = 0.0, 0.0
    for le in sorted(buckets):
        c = buckets[le]
        if within_s <= le:
            if math.isinf(le):
                return min(1.0, below / total)  # beyond the last finite bound: only what is known below it
            inside = (within_s - lo) / (le - lo) if le > lo else 1.0
            return min(1.0, max(0.0, (below + (c - below) * inside) / total))
        lo, below = le, c
    return min(1.0, below / total)


@dataclass
class ServingPoints:
    """The serving queries' answers, by (card, ts)."""

    values: dict[str, dict[tuple[str, float], object]] = field(default_factory=dict)  # query key -> point values
    buckets: dict[tuple[str, float], dict[float, float]] = field(default_factory=dict)
    ttft_within_s: float | None = None
    digest: str = ""  # of the answers, so a pull whose serving answers differ is another source

    def row(self, key: tuple[str, float]) -> tuple[dict[str, object], str | None]:
        """A rate point's serving columns (None: not measured), or the reason it is no measurement."""
        out: dict[str, object] = {"batch_mean": self.values.get("batch_mean", {}).get(key)}
        for name in ("tpot", "ttft"):
            total = _number(self.values.get(f"{name}_sum", {}).get(key))
            count = _number(self.values.get(f"{name}_count", {}).get(key))
            if total is not None and total > 0 and not (count is not None and count > 0):
                return out, f"no-count:{name}_s"
            out[f"{name}_s"] = total / count if total is not None and count else None
        if self.ttft_within_s is not None and key in self.buckets:
            share = share_within(self.buckets[key], self.ttft_within_s)
            out["ttft_ok_share"] = None if math.isnan(share) else share
        return out, None


def _number(v: object) -> float | None:
    try:
        x = float(v)  # Prometheus gives values as strings: "NaN", "+Inf" parse too
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def fetch_serving(fetch: Callable[[str], tuple[bytes, str]], ask: ServingAsk, labels: tuple[str, ...],
                  points_of: Callable[[bytes, str, tuple[str, ...]], dict], series_of: Callable[[bytes, str], list],
                  card_of: Callable[[dict, tuple[str, ...]], str | None]) -> ServingPoints:
    """Ask each serving query (`fetch(query)` -> answer, name) and keep its points by (card, ts) (the parsers of
    `fleet.ingest.prometheus` passed in: that module calls this one)."""
    got = ServingPoints(ttft_within_s=ask.ttft_within_s)
    h = hashlib.sha256(repr(ask.ttft_within_s).encode())
    for key, query in ask.queries.items():
        body, name = fetch(query)
        h.update(body)
        got.digest = h.hexdigest()
        if key != "ttft_bucket":
            got.values[key] = points_of(body, name, labels)
            continue
        for series in series_of(body, name):
            metric = series.get("metric") if isinstance(series, dict) else None
            points = series.get("values") if isinstance(series, dict) else None
            if not isinstance(metric, dict) or not isinstance(points, list) or (card := card_of(metric, labels)) is None:
                continue
            le = _number(metric.get("le")) if metric.get("le") not in ("+Inf", "Inf") else math.inf
            if le is None:
                raise BadSource(f"{name}: a bucket series without a numeric le label")
            for point in points:
                if isinstance(point, list) and len(point) == 2 and (v := _number(point[1])) is not None:
                    got.buckets.setdefault((card, float(point[0])), {})[le] = v
    return got
