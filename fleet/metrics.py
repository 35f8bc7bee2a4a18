"""Prometheus metrics of `fleet serve`, all in this module.

Naming rule: every name starts with `fleet_`, says what it measures in the
field's words, and ends in its base unit: `_usd` for dollars, `_tokens` for
tokens, `_tokens_per_second` for rates, `_seconds` for time, `_cards` for
counts of cards, `_ratio` for a ratio from 0 to 1 (convergence can pass 1 in a
month the ideal costs more than the real bill, which a short month can show).
Counters end in `_total` and are month-to-date where a user graphs a rate
(dollars, tokens, evictions); they restart with each month, which Prometheus's
`rate()` reads as a counter reset. Labels are bounded (`part`, `window`, `job`,
`outcome`, `reason`, `kind`) except `card`, the card id, which
`[metrics] per_card = false` switches off for large pools. Every known label
value is emitted from the first scrape (zero until it happens), so a dashboard
never sees a series appear from nothing.

`FleetCollector` reads the service's state when Prometheus scrapes: the last
snapshot the metrics job refreshed (the store's view) and the scheduler's job
counters as they stand.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

BILL_PARTS = ("rent", "churn")
INGEST_OUTCOMES = ("stored", "duplicate", "quarantined")
DECISION_KINDS = ("size", "eviction-pass", "evict", "add", "release")


def _finite(v: float) -> float:
    return float(v) if v is not None and math.isfinite(float(v)) else float("nan")


class FleetCollector(Collector):
    """Reads a `fleet.service.Snapshot` and the job statistics at scrape time."""

    def __init__(self, snapshot: Callable[[], object], job_stats: Callable[[], dict], per_card: bool = True,
                 quarantine_reasons: Iterable[str] = ()):
        self._snapshot = snapshot
        self._job_stats = job_stats
        self.per_card = per_card
        self.reasons = tuple(quarantine_reasons)

    def describe(self) -> list[Metric]:
        return []  # names are fixed by this module; nothing to predict at registration

    def collect(self) -> Iterable[Metric]:
        yield from self._jobs()
        s = self._snapshot()
        if s is None:
            return
        yield from self._fleet(s)

    def _jobs(self) -> Iterable[Metric]:
        stats = self._job_stats()
        dur = SummaryMetricFamily("fleet_job_duration_seconds", "Wall time the service's jobs took.", labels=["job"])
        runs = CounterMetricFamily("fleet_job_runs", "Runs of each job, by outcome.", labels=["job", "outcome"])
        last = GaugeMetricFamily("fleet_job_last_success_timestamp_seconds",
                                 "Service clock time of each job's last successful run (0: none yet).", labels=["job"])
        for name, st in stats.items():
            dur.add_metric([name], count_value=st.runs, sum_value=st.duration_s_sum)
            runs.add_metric([name, "ok"], max(0, st.runs - st.errors))
            runs.add_metric([name, "error"], st.errors)
            runs.add_metric([name, "missed"], st.misses)
            runs.add_metric([name, "skipped-overlap"], st.skipped_overlap)
            last.add_metric([name], st.last_success_ts or 0.0)
        yield dur
        yield runs
        yield last

    def _fleet(self, s) -> Iterable[Metric]:
        t = s.totals

        def gauge(name, doc, value):
            return GaugeMetricFamily(name, doc, value=_finite(value))

        yield gauge("fleet_clock_timestamp_seconds", "The service's clock (wall time, or the simulated time).", s.clock_ts)
        yield gauge("fleet_month_start_timestamp_seconds", "Start of the month on view.", s.month_start_ts)
        yield gauge("fleet_month_hours_billed", "Hours of the month decided and billed so far.", s.hours_billed)
        yield gauge("fleet_run_set_cards", "Cards in the run set (kept warm) this hour.", len(s.run_set))
        yield gauge("fleet_pool_cards", "Cards of the policy's class in the pool at the month's start.", s.pool_cards)
        yield gauge("fleet_pool_eligible_cards", "Pool cards not evicted this month.", s.eligible_cards)
        yield gauge("fleet_demand_tokens_per_second", "Demand this hour.", s.demand_tps)
        yield gauge("fleet_scored_capacity_tokens_per_second", "Capacity of the run set by its scores this hour.", s.scored_capacity_tps)
        yield gauge("fleet_capacity_tokens_per_second",
                    "True capacity of the run set in the last billed hour (simulation truth, or hindsight).", s.capacity_tps)

        bill = CounterMetricFamily("fleet_bill_usd", "Month-to-date bill by part: warm rent and churn fees.", labels=["part"])
        bill.add_metric(["rent"], t.get("bill_warm_usd", 0.0))
        bill.add_metric(["churn"], t.get("bill_churn_usd", 0.0))
        yield bill
        yield CounterMetricFamily("fleet_idle_usd", "Month-to-date warm rent that bought capacity which moved no tokens.",
                                  value=t.get("idle_usd", 0.0))
        yield CounterMetricFamily("fleet_ideal_bill_usd", "Month-to-date bill of the ideal operator.", value=t.get("ideal_bill_usd", 0.0))
        yield gauge("fleet_convergence_ratio", "Ideal bill over the real bill, month to date.", t.get("convergence", float("nan")))
        for name, key, doc in (
            ("fleet_demanded_tokens", "demand_tokens", "Month-to-date tokens demanded."),
            ("fleet_delivered_tokens", "delivered_tokens", "Month-to-date tokens delivered (demand up to capacity)."),
            ("fleet_unmet_tokens", "unmet_tokens", "Month-to-date tokens demanded and not delivered."),
        ):
            yield CounterMetricFamily(name, doc, value=t.get(key, 0.0))
        yield gauge("fleet_unmet_demand_ratio", "Unmet over demanded tokens, month to date.", t.get("unmet_share", 0.0))

        yield CounterMetricFamily("fleet_evictions", "Month-to-date evictions.", value=s.evictions)
        yield CounterMetricFamily("fleet_wrong_evictions",
                                  "Month-to-date evictions of cards whose true rate sat at or above the run set's median.",
                                  value=s.wrong_evictions)
        yield gauge("fleet_eviction_budget_cards", "The month's eviction budget.", s.eviction_budget)
        yield gauge("fleet_eviction_budget_left_cards", "Evictions the month's budget still allows.", s.budget_left)
        yield gauge("fleet_eviction_breaker_open", "1 if the last eviction pass found too many cards bad at once and evicted nobody.",
                    1.0 if s.breaker_open else 0.0)

        check = GaugeMetricFamily("fleet_check_pass", "1 if the check passes month to date, 0 if it fails.", labels=["check"])
        for name in ("capacity", "convergence", "eviction"):
            c = s.checks.get(name)
            check.add_metric([name], float("nan") if c is None else (1.0 if c["pass"] else 0.0))
        yield check

        dec = CounterMetricFamily("fleet_decisions", "Decisions journaled this month, by kind.", labels=["kind"])
        acted = CounterMetricFamily("fleet_decisions_acted", "Decisions carried out this month, by kind.", labels=["kind"])
        for kind in DECISION_KINDS:
            j, a = s.decisions.get(kind, (0, 0))
            dec.add_metric([kind], j)
            acted.add_metric([kind], a)
        yield dec
        yield acted

        ing = CounterMetricFamily("fleet_ingest_records", "Telemetry records read, by outcome.", labels=["outcome"])
        for o in INGEST_OUTCOMES:
            ing.add_metric([o], s.ingest.get(o, 0))
        yield ing
        q = CounterMetricFamily("fleet_ingest_quarantined_records", "Telemetry records quarantined, by reason.", labels=["reason"])
        for r in sorted(set(self.reasons) | set(s.quarantine)):
            q.add_metric([r], s.quarantine.get(r, 0))
        yield q

        if self.per_card:
            score = GaugeMetricFamily("fleet_card_score_tokens_per_second", "A card's windowed rate.", labels=["card", "window"])
            tpd = GaugeMetricFamily("fleet_card_tokens_per_usd", "Tokens a dollar of the card's rent buys at its score.",
                                    labels=["card", "window"])
            for window, cards in s.scores.items():
                for card, (v, d) in sorted(cards.items()):
                    score.add_metric([card, window], _finite(v))
                    tpd.add_metric([card, window], _finite(d))
            yield score
            yield tpd
            warm = GaugeMetricFamily("fleet_card_warm", "1 if the card is in the run set this hour.", labels=["card"])
            in_set = set(s.run_set)
            for card in sorted({c for cards in s.scores.values() for c in cards} | in_set):
                warm.add_metric([card], 1.0 if card in in_set else 0.0)
            yield warm


def make_registry(collector: FleetCollector) -> CollectorRegistry:
    """A registry holding only the fleet's collector (no process or platform collectors)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def serve_metrics(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9108):
    """Serve `/metrics` with prometheus-client's HTTP server; returns (server, thread). Port 0 picks a free port."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=registry)
