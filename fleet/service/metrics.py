"""Prometheus metrics of `fleet serve`, all in this module.

Naming rule: every name starts with `fleet_`, says what it measures in the
field's words, and ends in its base unit: `_usd` for dollars, `_tokens` for
tokens, `_tokens_per_second` for rates, `_seconds` for time, `_cards` for
counts of cards, `_ratio` for a ratio from 0 to 1 (convergence can pass 1 in a
month the ideal costs more than the real bill, which a short month can show).
Counters end in `_total` and are month-to-date where a user graphs a rate
(dollars, tokens, evictions); they restart with each month, which Prometheus's
`rate()` reads as a counter reset. A state that is on or off is a 0/1 gauge
named for the state (`fleet_leader`, `..._open`, `..._pass`, `..._warm`).
Labels are bounded (`part`, `window`, `service_job`, `outcome`, `reason`, `kind`,
`card_class`; never `job` or `instance`, which Prometheus sets on every target it
scrapes) except `card`, the card id, which `[metrics] per_card = false`
switches off for large pools. Every known label
value is emitted from the first scrape (zero until it happens), so a dashboard
never sees a series appear from nothing.

`FleetCollector` reads the service's state when Prometheus scrapes: the last
snapshot the metrics job refreshed (the store's view) and the scheduler's job
counters as they stand. `/metrics` writes prometheus-client's text for the
fleet-level families and renders the per-card families itself, in the same
names, order, label escaping and value format: a 10,000-card pool has some
70,000 per-card samples, too many to build and format one sample at a time.
"""

from __future__ import annotations

import gzip
import math
import operator
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable
from urllib.parse import urlsplit

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from fleet.service.reconcile import MISMATCH_KINDS
from storage.values import ACTION_KINDS, DECISION_KINDS, Kind

INGEST_OUTCOMES = ("stored", "duplicate", "quarantined")
RECONCILE_KINDS = MISMATCH_KINDS


def _finite(v: float) -> float:
    return float(v) if v is not None and math.isfinite(float(v)) else float("nan")


def _go_float(v) -> str:
    """`floatToGoString(_finite(v))` of prometheus-client, inlined: NaN for a missing or infinite value, else the
    shortest repr, with Go's exponent form for positive values of seven or more integer digits."""
    if v is None:
        return "NaN"
    d = float(v)
    if not math.isfinite(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _go_floats(values: np.ndarray) -> list[str]:
    """`_go_float` of each value (None read as NaN): Python's repr, rewritten in Go's exponent form where it has seven
    or more integer digits (values of 1e6 and more), and NaN for missing or infinite values."""
    out = list(map(repr, values.tolist()))
    for i in np.flatnonzero(values >= 1e6).tolist():
        s = out[i]
        dot = s.find(".")
        if dot > 6:
            out[i] = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.") + f"e+{dot - 1:02d}"
    for i in np.flatnonzero(~np.isfinite(values)).tolist():
        out[i] = "NaN"
    return out


def _escape_label(v: str) -> str:
    """A label value as the text format writes it (backslash, newline and double quote escaped)."""
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _help(name: str, doc: str, kind: str) -> str:
    """The HELP and TYPE lines of one family, the docstring escaped as prometheus-client escapes it."""
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


CARD_SCORE = ("fleet_card_score_tokens_per_second", "A card's windowed rate.")
CARD_TOKENS_PER_USD = ("fleet_card_tokens_per_usd", "Tokens a dollar of the card's rent buys at its score.")
CARD_WARM = ("fleet_card_warm", "1 if the card is in the run set this hour.")
# From the serving stack's telemetry (`fleet.service.curves`), for the cards that carried it.
CARD_STREAM = ("fleet_card_stream_tps", "Tokens a second a stream saw on the card in the last scored hour: one over its "
               "mean time per output token.")
CARD_ALPHA = ("fleet_card_step_alpha_seconds", "The card's fitted decode step at batch zero.")
CARD_BETA = ("fleet_card_step_beta_seconds", "What each stream adds to the card's fitted decode step.")
POOL_TTFT = ("fleet_pool_ttft_seconds", "The run set's expected wait for a first token at the promise's percentile, at "
             "the demand the last decided hour was sized for (+Inf: its slots cannot carry the requests; NaN: no "
             "first-token promise sized to).")
GOODPUT_TPS = ("fleet_goodput_tokens_per_second", "Under a promise: tokens a second served within it, the month-to-date "
               "mean of the billed hours (NaN before the first).")
GOODPUT_RATIO = ("fleet_goodput_ratio", "Under a promise: tokens served within it over tokens delivered, month to date "
                 "(the latency check's figure; NaN before the first billed hour).")
SLO_ATTAINMENT = ("fleet_slo_attainment_ratio", "Share of first tokens within the promise's ttft_ms in the last scored "
                  "hour, from the time-to-first-token buckets.")


def curve_series(curves) -> list[tuple[tuple[str, str], list[str], np.ndarray]]:  # noqa: ANN001 - `CardCurves` or None
    """The per-card curve families: (name and help, the cards, their values), each card with a finite value."""
    if curves is None:
        return []
    keys = np.array(curves.index.keys, dtype=object)
    out = []
    for fam, values in ((CARD_STREAM, curves.stream_tps), (CARD_ALPHA, curves.fitted.alpha_s), (CARD_BETA, curves.fitted.beta_s)):
        have = np.isfinite(values)
        order = np.argsort(keys[have], kind="stable")
        out.append((fam, keys[have][order].tolist(), np.asarray(values, dtype=np.float64)[have][order]))
    return out


class FleetCollector(Collector):
    """Reads a `fleet.service.Snapshot` and the job statistics at scrape time."""

    def __init__(self, snapshot: Callable[[], object], job_stats: Callable[[], dict], per_card: bool = True,
                 quarantine_reasons: Iterable[str] = (), leadership: Callable[[], tuple[bool, int | None]] | None = None,
                 now: Callable[[], float] | None = None, retried: Callable[[], int] | None = None):
        self._snapshot = snapshot
        self._retried = retried  # failed tries this process will try again, read at scrape time
        self._now = now  # the service's clock read at scrape time (a simulation's runs far ahead of its last snapshot)
        self._job_stats = job_stats
        self._leadership = leadership  # (leads, lease epoch) read at scrape time; None: no lease, no series
        self.per_card = per_card
        self.reasons = tuple(quarantine_reasons)
        self._prefix_cache = None  # (key, prefixes of the score and tokens-per-usd lines, prefixes of the warm lines)

    def describe(self) -> list[Metric]:
        return []  # names are fixed by this module; nothing to predict at registration

    def collect(self) -> Iterable[Metric]:
        """Every family as prometheus-client metric objects (the reference rendering; `/metrics` uses `exposition`)."""
        yield from self._jobs()
        yield from self._lease()
        s = self._snapshot()
        if s is None:
            return
        yield from self._fleet(s)
        if self.per_card:
            yield from self._cards(s)

    def exposition(self, encoder: Callable = generate_latest, openmetrics: bool = False) -> bytes:
        """Every family as `encoder` (prometheus-client's text or OpenMetrics writer) writes `collect()`, with the
        per-card families rendered by `card_text` from the same snapshot: they are gauges, whose lines read the same
        in both formats; OpenMetrics ends with `# EOF`, so they go in before it."""
        s = self._snapshot()
        fleet = list(self._jobs()) + list(self._lease()) + ([] if s is None else list(self._fleet(s)))
        head = encoder(_Families(fleet))
        if s is None or not self.per_card:
            return head
        cards = self.card_text(s).encode("utf-8")
        if openmetrics:
            eof = b"# EOF\n"
            if not head.endswith(eof):
                raise ValueError("an OpenMetrics exposition that does not end in # EOF")
            return head[: -len(eof)] + cards + eof
        return head + cards

    def _jobs(self) -> Iterable[Metric]:
        stats = self._job_stats()
        dur = SummaryMetricFamily("fleet_job_duration_seconds", "Wall time the service's jobs took.", labels=["service_job"])
        runs = CounterMetricFamily("fleet_job_runs", "Runs of each job, by outcome.", labels=["service_job", "outcome"])
        last = GaugeMetricFamily("fleet_job_last_success_timestamp_seconds",
                                 "Service clock time of each job's last successful run (0: none yet).", labels=["service_job"])
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
        if self._now is not None:
            now = self._now()
            age = GaugeMetricFamily("fleet_job_last_success_age_seconds",
                                    "Service clock seconds since each job's last successful run, read at the scrape "
                                    "(NaN: none yet).", labels=["service_job"])
            for name, st in stats.items():
                age.add_metric([name], max(0.0, now - st.last_success_ts) if st.last_success_ts else math.nan)
            yield age

    def _acting(self, s) -> Iterable[Metric]:
        """Actions by outcome (done, set aside, expired: month to date from the journal; retried: this process's
        tries that failed and were tried again) and the age of the oldest action still waiting."""
        d = s.decisions
        acts = CounterMetricFamily("fleet_actions", "Actions by outcome: done, retried (failed tries to be tried again, "
                                   "since the process started), set-aside and expired (this month).", labels=["outcome"])
        acts.add_metric(["done"], sum(d.get(k, (0, 0))[1] for k in ACTION_KINDS))
        acts.add_metric(["retried"], self._retried() if self._retried is not None else 0)
        acts.add_metric(["set-aside"], d.get(Kind.ACT_FAILED, (0, 0))[0])
        acts.add_metric(["expired"], d.get(Kind.ACT_EXPIRED, (0, 0))[0])
        yield acts
        now = self._now() if self._now is not None else s.clock_ts
        age = 0.0 if s.oldest_unacted_ts is None else max(0.0, now - s.oldest_unacted_ts)
        yield GaugeMetricFamily("fleet_oldest_unacted_decision_age_seconds",
                                "Service clock seconds since the hour of the oldest action neither carried out nor set "
                                "aside (0: none waiting).", value=age)
        mismatches = GaugeMetricFamily("fleet_reconcile_mismatches", "Cards on which the journal and the pool's "
                                       "telemetry disagree now, by kind: silent (warm, no telemetry for "
                                       "[reconcile] silent_after_s), still-serving (released or evicted, serving tokens).",
                                       labels=["kind"])
        for kind in RECONCILE_KINDS:
            mismatches.add_metric([kind], getattr(s, "reconcile_mismatches", {}).get(kind, 0))
        yield mismatches

    def _lease(self) -> Iterable[Metric]:
        """Whether this process leads the store now, and the lease's epoch (its own, or the leader's it waits for)."""
        if self._leadership is None:
            return
        leads, epoch = self._leadership()
        yield GaugeMetricFamily("fleet_leader", "1 if this process holds the store's lease and runs the writing jobs; "
                                "0 on a standby.", value=1.0 if leads else 0.0)
        yield GaugeMetricFamily("fleet_leader_epoch", "Epoch of the store's lease: this process's if it leads, else the "
                                "leader's as last read (0: none seen).", value=float(epoch or 0))

    def _fleet(self, s) -> Iterable[Metric]:
        t = s.totals

        def gauge(name, doc, value):
            return GaugeMetricFamily(name, doc, value=_finite(value))

        yield gauge("fleet_clock_timestamp_seconds", "The service's clock (wall time, or the simulated time).", s.clock_ts)
        yield from self._promise(s)
        yield gauge("fleet_month_start_timestamp_seconds", "Start of the month on view.", s.month_start_ts)
        yield gauge("fleet_month_hours_billed", "Hours of the month decided and billed so far.", s.hours_billed)
        yield gauge("fleet_run_set_cards", "Cards in the run set (kept warm) this hour.", len(s.run_set))
        yield gauge("fleet_pool_cards", "Cards of the policy's class in the pool at the month's start.", s.pool_cards)
        yield gauge("fleet_pool_eligible_cards", "Pool cards not evicted this month.", s.eligible_cards)
        yield gauge("fleet_demand_tokens_per_second", "Demand this hour.", s.demand_tps)
        yield gauge("fleet_demand_forecast_tps", "The demand forecast this hour was sized to (tokens/s; NaN: none yet).",
                    s.demand_forecast_tps)
        yield gauge("fleet_demand_measured_tps", "The demand the last billed hour had (tokens/s): measured for a real pool, "
                    "the simulation's under --simulate; NaN when none was measured.", s.demand_measured_tps)
        now = self._now() if self._now is not None else s.clock_ts
        yield gauge("fleet_demand_source_last_answer_age_seconds", "Seconds since the newest demand sample a real pool's "
                    "demand source gave, read at the scrape (NaN: none yet, or a simulation).",
                    now - s.demand_answered_ts if s.demand_answered_ts is not None else None)
        yield gauge("fleet_demand_forecast_error_tps", "Mean |forecast - measured| demand over the last day of billed hours "
                    "(tokens/s).", s.forecast_error_tps)
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
        if s.promised:
            yield gauge(*GOODPUT_TPS, t.get("goodput_avg_tps"))
            yield gauge(*GOODPUT_RATIO, t.get("goodput_share"))

        yield CounterMetricFamily("fleet_evictions", "Month-to-date evictions.", value=s.evictions)
        yield CounterMetricFamily("fleet_wrong_evictions",
                                  "Month-to-date evictions of cards whose true rate sat at or above the run set's median.",
                                  value=s.wrong_evictions)
        yield gauge("fleet_eviction_budget_cards", "The month's eviction budget.", s.eviction_budget)
        yield gauge("fleet_eviction_budget_left_cards", "Evictions the month's budget still allows.", s.budget_left)
        yield gauge("fleet_eviction_breaker_open", "1 if the last eviction pass found too many cards bad at once and evicted nobody.",
                    1.0 if s.breaker_open else 0.0)

        check = GaugeMetricFamily("fleet_check_pass", "1 if the check passes month to date, 0 if it fails.", labels=["check"])
        for name in ("capacity", "convergence", "eviction", *(("latency",) if s.promised else ())):
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
        yield from self._acting(s)

        ing = CounterMetricFamily("fleet_ingest_records", "Telemetry records read, by outcome.", labels=["outcome"])
        for o in INGEST_OUTCOMES:
            ing.add_metric([o], s.ingest.get(o, 0))
        yield ing
        q = CounterMetricFamily("fleet_ingest_quarantined_records", "Telemetry records quarantined, by reason.", labels=["reason"])
        for r in sorted(set(self.reasons) | set(s.quarantine)):
            q.add_metric([r], s.quarantine.get(r, 0))
        yield q

    @staticmethod
    def _promise(s) -> Iterable[Metric]:
        """The promise's pool figures: the measured first-token attainment, the expected first-token wait."""
        curves = getattr(s, "curves", None)
        if curves is not None and math.isfinite(curves.slo_attainment_ratio):  # only where the buckets gave a share
            yield GaugeMetricFamily(*SLO_ATTAINMENT, value=curves.slo_attainment_ratio)
        ttft = getattr(s, "pool_ttft_s", None)
        yield GaugeMetricFamily(*POOL_TTFT, value=float("nan") if ttft is None else float(ttft))

    def _cards(self, s) -> Iterable[Metric]:
        cls = s.card_classes

        def labels(card: str, **more) -> dict:
            # A card of no known class has no card_class label (to Prometheus, the same as an empty one).
            return {"card": card, **({"card_class": cls[card]} if cls.get(card) else {}), **more}

        score = GaugeMetricFamily(*CARD_SCORE, labels=["card", "card_class", "window"])
        tpd = GaugeMetricFamily(*CARD_TOKENS_PER_USD, labels=["card", "card_class", "window"])
        for window, cards in s.scores.items():
            for card, (v, d) in sorted(cards.items()):
                score.samples.append(Sample(score.name, labels(card, window=window), _finite(v)))
                tpd.samples.append(Sample(tpd.name, labels(card, window=window), _finite(d)))
        yield score
        yield tpd
        warm = GaugeMetricFamily(*CARD_WARM, labels=["card", "card_class"])
        in_set = set(s.run_set)
        for card in sorted({c for cards in s.scores.values() for c in cards} | in_set):
            warm.samples.append(Sample(warm.name, labels(card), 1.0 if card in in_set else 0.0))
        yield warm
        for (name, doc), cards, values in curve_series(getattr(s, "curves", None)):
            fam = GaugeMetricFamily(name, doc, labels=["card", "card_class"])
            fam.samples.extend(Sample(name, labels(c), float(v)) for c, v in zip(cards, values.tolist()))
            yield fam

    def card_text(self, s) -> str:
        """The per-card families in the text format, in one pass of string joins: the escaped label prefix of each
        (card, window) line is kept between scrapes while the pool's cards stay the same."""
        windows = list(s.scores)
        ordered = {w: sorted(s.scores[w]) for w in windows}
        in_set = set(s.run_set)
        all_cards = sorted({c for w in windows for c in ordered[w]} | in_set)
        cls = s.card_classes
        key = (tuple(windows), tuple(all_cards), tuple(tuple(ordered[w]) for w in windows),
               tuple(cls.get(c, "") for c in all_cards))
        cached = self._prefix_cache  # one read: concurrent scrapes each see a whole cache entry
        if cached is None or cached[0] != key:
            esc = {c: f'card="{_escape_label(c)}"' + (f',card_class="{_escape_label(cls[c])}"' if cls.get(c) else "")
                   for c in all_cards}
            prefixes = {
                (name, w): [f'{name}{{{esc[c]},window="{_escape_label(w)}"}} ' for c in ordered[w]]
                for name in (CARD_SCORE[0], CARD_TOKENS_PER_USD[0]) for w in windows
            }
            cached = (key, prefixes, [f'{CARD_WARM[0]}{{{esc[c]}}} ' for c in all_cards])
            self._prefix_cache = cached
        _, prefixes, warm_prefixes = cached
        out = []
        for col, (name, doc) in enumerate((CARD_SCORE, CARD_TOKENS_PER_USD)):
            out.append(_help(name, doc, "gauge"))
            for w in windows:
                if ordered[w]:
                    cards = s.scores[w]
                    values = _go_floats(np.array([cards[c][col] for c in ordered[w]], dtype=float))
                    out.append("\n".join(map(operator.add, prefixes[(name, w)], values)) + "\n")
        out.append(_help(*CARD_WARM, "gauge"))
        out.append("".join([p + ("1.0\n" if c in in_set else "0.0\n") for p, c in zip(warm_prefixes, all_cards)]))
        for (name, doc), cards, values in curve_series(getattr(s, "curves", None)):  # a few families: not cached
            out.append(_help(name, doc, "gauge"))
            lead = [f'{name}{{card="{_escape_label(c)}"' + (f',card_class="{_escape_label(cls[c])}"' if cls.get(c) else "") + "} "
                    for c in cards]
            out.append("".join(p + v + "\n" for p, v in zip(lead, _go_floats(values))))
        return "".join(out)


class _Families:
    """A fixed list of families in the shape `generate_latest` reads."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


class FleetRegistry(CollectorRegistry):
    """A registry holding only the fleet's collector (no process or platform collectors); `exposition()` is the
    `/metrics` body."""

    def __init__(self, collector: FleetCollector):
        super().__init__(auto_describe=False)
        self.collector = collector
        self.register(collector)

    def exposition(self) -> bytes:
        return self.collector.exposition()


def make_registry(collector: FleetCollector) -> FleetRegistry:
    return FleetRegistry(collector)


class _MetricsHandler(BaseHTTPRequestHandler):
    """Answers a GET of /metrics in the format the scraper's `Accept` asks for (OpenMetrics or the text format; the
    text format 0.0.4 when it names neither), gzipped when its `Accept-Encoding` takes gzip, through
    prometheus-client's own negotiation; any other path is 404 (a mistyped scrape target is told, not fed)."""

    registry: CollectorRegistry

    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            body = b"not found: the metrics are at /metrics\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        reg = self.registry
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        if isinstance(reg, FleetRegistry):
            body = reg.collector.exposition(encoder, content_type.startswith("application/openmetrics-text"))
        else:
            body = encoder(reg)
        zipped = gzip_accepted(self.headers.get("Accept-Encoding", ""))
        if zipped:
            body = gzip.compress(body, compresslevel=1)  # card lines repeat: the fastest level compresses them almost as well
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if zipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept, Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        """Scrapes are not logged."""


class _MetricsServer(ThreadingHTTPServer):
    daemon_threads = True


def serve_metrics(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9108):
    """Serve `/metrics` on a daemon thread; returns (server, thread). Port 0 picks a free port."""
    handler = type("FleetMetricsHandler", (_MetricsHandler,), {"registry": registry})
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]  # an IPv6 host gets an IPv6 socket
    server = type("FleetMetricsServer", (_MetricsServer,), {"address_family": family})((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="fleet-metrics")
    thread.start()
    return server, thread
