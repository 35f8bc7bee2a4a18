"""A Prometheus server as a telemetry source (`fleet.ingest.sources`): its table, `[ingest.sources.prometheus]`, a
run's pull since the last rolled-up hour with the pool's demand beside it, and its `fleet serve --check` line.

Each run asks for the rate and busy queries at `step_s` from the last rolled-up hour (at most 6 hours back, an hour
at first), and the pool's demand source (`fleet.ingest.demand`) for the same range, with the configured
credentials. `fleet ingest --prometheus` pulls a range of its own through `pull_range`, the same call.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from fleet.core.scenario import Strict
from fleet.core.units import HOUR_S
from fleet.credentials import Credentials
from fleet.ingest.demand.vllm_queue import DEFAULT_UNSERVED_QUERY
from fleet.ingest.formats import Parsed
from fleet.ingest.prometheus import (DEFAULT_BUSY_QUERY, DEFAULT_CARD_LABEL, DEFAULT_PROMETHEUS_QUERY, _shown, card_labels,
                                     fetch_prometheus, pull_prometheus)
from fleet.ingest.prometheus_serving import serving_ask

if TYPE_CHECKING:
    from fleet.ingest.source_run import IngestRun

PULL_BACK_HOURS = 6
"""How far back a run pulls at most: a service down longer than this leaves the hours between unpulled (Prometheus
may no longer hold them at full resolution anyway)."""


class PrometheusSettings(Strict):
    """Prometheus' table, `[ingest.sources.prometheus]`: the server, the rate and busy queries and
    the labels naming a card, the credentials, the step; with `serving`, vLLM's batch, time per output token and
    first token beside the rate (`fleet.ingest.prometheus_serving`); and the pool's demand beside its telemetry: the part not
    served from vLLM's queue (`queue_query`), or the whole demand from a query of the user's own (`demand_query`,
    e.g. a gateway's offered-tokens counter). `demand_source` names the source (default: "query" if demand_query
    is set)."""

    prometheus_url: str = Field(min_length=1)
    query: str = DEFAULT_PROMETHEUS_QUERY
    busy_query: str = DEFAULT_BUSY_QUERY  # the share of each step a card was serving; "" for none
    card_label: str | tuple[str, ...] = DEFAULT_CARD_LABEL  # several labels name a card joined with "/"
    auth: Credentials | None = None  # for the Prometheus pull
    step_s: int = Field(default=60, ge=1)
    demand_source: str | None = None
    demand_query: str | None = None
    queue_query: str = DEFAULT_UNSERVED_QUERY
    serving: bool = False  # also pull vLLM's batch, time per output token and first token (`prometheus_serving`)
    serving_window: str = "1m"  # the rates' window of the serving queries
    batch_window: str | None = None  # the running requests' mean over this (default: serving_window)
    ttft_within_s: float | None = Field(default=None, gt=0)  # the share of first tokens within it (the [slo]'s ttft)

    @model_validator(mode="after")
    def _demand_source(self) -> "PrometheusSettings":
        from fleet.ingest.demand import demand_source

        source = demand_source(self.demand_source_name)  # an unknown name is refused, naming the known
        if not source.pulled:
            raise ValueError(f"demand_source {source.name!r} reads files (drop NAME.demand.{source.name} into the folder)")
        if source.name == "query" and not self.demand_query:
            raise ValueError("demand_source 'query' needs demand_query (PromQL giving the pool's offered tokens/s)")
        return self

    @property
    def demand_source_name(self) -> str:
        return self.demand_source or ("query" if self.demand_query else "vllm-queue")

    @property
    def demand_source_query(self) -> str | None:
        """The query the demand source asks: the user's own, or the vLLM queue's."""
        return self.demand_query if self.demand_source_name == "query" else self.queue_query


class PrometheusSource:
    """A Prometheus server as a telemetry source: pulled since the last rolled-up hour at each run of the service, or
    over a range by `fleet ingest --prometheus`."""

    check_name = "prometheus"

    def __init__(self, settings: PrometheusSettings):
        self.settings = settings

    def pull_range(self, start_ts: float, end_ts: float, step_s: float) -> Parsed:
        """The rate query's records over [start_ts, end_ts], each with the busy query's value (an empty busy query is
        none), parsed as a file would be."""
        own = self.settings
        serving = (serving_ask(card_labels(own.card_label), own.serving_window, own.batch_window, own.ttft_within_s)
                   if own.serving else None)
        return pull_prometheus(own.prometheus_url, own.query, start_ts, end_ts, step_s, own.card_label,
                               own.busy_query or None, own.auth, serving=serving)

    def pull(self, run: IngestRun) -> int:
        """One run of the service: the rate and busy queries and the pool's demand since the last rolled-up hour,
        stored; the records and demand samples read."""
        from fleet.ingest.demand import pull_demand
        from fleet.ingest.store import ingest_parsed

        own = self.settings
        end = int(run.now()) // own.step_s * own.step_s
        last = run.last_rollup_ts()
        start = min(max(end - PULL_BACK_HOURS * HOUR_S, last if last is not None else end - HOUR_S), end - own.step_s)
        report = ingest_parsed(run.repo, self.pull_range(start, end, own.step_s), run.settings())
        demand = pull_demand(run.repo, own.demand_source_name, own.prometheus_url, start, end, own.step_s, run.settings(),
                             own.demand_source_query, own.auth)
        return report.read + demand.read

    def check(self, timeout_s: float) -> tuple[bool, str]:
        """`fleet serve --check`: the server answers a range query, with the credentials, within `timeout_s`."""
        own = self.settings
        now = time.time()
        try:
            fetch_prometheus(own.prometheus_url, "vector(1)", now - 60, now, 60, timeout_s, own.auth)
        except Exception as err:  # noqa: BLE001 - every failure of a check is its line
            return False, " ".join(str(err).split()) or type(err).__name__
        return True, f"{_shown(own.prometheus_url)} answers a range query"
