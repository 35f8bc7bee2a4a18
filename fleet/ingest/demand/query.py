"""A query of the user's own giving the whole demand in tokens/s, e.g. a gateway's offered-tokens counter
(`sum(rate(gateway_offered_tokens_total[1m]))`): it sees requests the pool never served, given up on included."""

from __future__ import annotations

from fleet.core.errors import ConfigError
from fleet.ingest.demand.base import DemandRequest, summed_matrix
from fleet.ingest.formats import Parsed


class OfferedQuery:
    name = "query"
    part = "offered"
    pulled = True

    def fetch(self, request: DemandRequest) -> Parsed:
        from fleet.ingest.prometheus import fetch_prometheus

        if not request.query:
            raise ConfigError("demand source 'query' needs [ingest.sources.prometheus] demand_query (PromQL giving the pool's offered tokens/s)")
        body, name = fetch_prometheus(request.prometheus_url or "", request.query, request.start_ts, request.end_ts,
                                      request.step_s, auth=request.auth)
        return summed_matrix(body, name)

