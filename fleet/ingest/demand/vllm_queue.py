"""vLLM's queue as the part of the demand a pool did not serve: the queue's growth in requests per second
(`vllm:num_requests_waiting`) times the mean tokens generated per request (its histogram's sum over its count).

Requests that join the queue faster than the pool serves them are demand it did not serve; a draining queue
is negative (the pool served more than arrived). Requests a client gave up on leave the queue unserved and unseen
here: a gateway's offered-tokens counter (`query`) sees them.
"""

from __future__ import annotations

from fleet.ingest.demand.base import DemandRequest, summed_matrix
from fleet.ingest.formats import Parsed


def unserved_query(window: str = "1m", tokens_window: str = "1h") -> str:
    """Tokens/s joining the queue over `window`, with the mean tokens per request over `tokens_window`."""
    return (f"sum(deriv(vllm:num_requests_waiting[{window}])) * "
            f"(sum(increase(vllm:request_generation_tokens_sum[{tokens_window}])) / "
            f"sum(increase(vllm:request_generation_tokens_count[{tokens_window}])))")


DEFAULT_UNSERVED_QUERY = unserved_query()


def backlog_query() -> str:
    """Tokens waiting now: the requests waiting over the pool times the mean tokens generated per request."""
    return ("sum(vllm:num_requests_waiting) * (sum(vllm:request_generation_tokens_sum) / "
            "sum(vllm:request_generation_tokens_count))")


def generated_query(window: str = "2m") -> str:
    """Tokens generated per second over the pool, over the last `window`."""
    return f"sum(rate(vllm:generation_tokens_total[{window}]))"


DEFAULT_BACKLOG_QUERY = backlog_query()
DEFAULT_GENERATED_QUERY = generated_query()


class VllmQueue:
    name = "vllm-queue"
    part = "unserved"
    pulled = True

    def fetch(self, request: DemandRequest) -> Parsed:
        from fleet.ingest.prometheus import fetch_prometheus

        body, name = fetch_prometheus(request.prometheus_url or "", request.query or DEFAULT_UNSERVED_QUERY,
                                      request.start_ts, request.end_ts, request.step_s, auth=request.auth)
        return summed_matrix(body, name)

