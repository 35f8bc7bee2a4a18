"""The Prometheus pull's serving columns (`fleet.ingest.prometheus_serving`): vLLM's running requests, its time per
output token and to first token as sum over count, the share within a time from the buckets, and a histogram whose
sum has no count quarantined with its reason while the other records are stored."""

from __future__ import annotations

import math

import pytest

from fleet.ingest import IngestSettings, ingest_parsed
from fleet.ingest.prometheus import pull_prometheus, rate_query
from fleet.ingest.prometheus_serving import serving_ask, serving_queries, share_within
from storage import sqlite_memory_repository
from tests.fake_prometheus import fake_prometheus, matrix
from tests.storage.stored import quarantined

T0 = 1_767_225_600
NOW = T0 + 2 * 3600


def test_the_queries_sum_each_histogram_per_card():
    q = serving_queries(("instance",), "90s", "30s")
    assert q["batch_mean"] == "sum by (instance) (avg_over_time(vllm:num_requests_running[30s]))"
    assert q["tpot_sum"] == "sum by (instance) (rate(vllm:time_per_output_token_seconds_sum[90s]))"
    assert q["ttft_bucket"] == "sum by (instance, le) (rate(vllm:time_to_first_token_seconds_bucket[90s]))"


@pytest.mark.parametrize(("within_s", "share"), [
    (0.5, 0.4),  # a bound: the bucket's count
    (0.75, 0.6),  # half-way from 0.5 (40) to 1.0 (80): 60
    (0.25, 0.2),  # half-way from 0 to the first bound
    (2.0, 0.8),  # beyond the last finite bound: only what is known below it
])
def test_the_share_within_a_time_reads_the_cumulative_buckets(within_s, share):
    assert share_within({0.5: 40.0, 1.0: 80.0, math.inf: 100.0}, within_s) == pytest.approx(share)


def test_no_observations_is_no_share():
    assert math.isnan(share_within({0.5: 0.0, math.inf: 0.0}, 1.0))
    assert math.isnan(share_within({0.5: 3.0}, 1.0))  # no +Inf bucket


def _answers(prom):
    a, b = {"instance": "a:8000"}, {"instance": "b:8000"}
    q = serving_queries(("instance",), "1m")
    prom.answers[rate_query()] = matrix({"metric": a, "values": [[T0, "3000"], [T0 + 60, "2000"], [T0 + 120, "0"]]},
                                        {"metric": b, "values": [[T0, "1000"], [T0 + 60, "1000"]]})
    prom.answers[q["batch_mean"]] = matrix({"metric": a, "values": [[T0, "64"], [T0 + 60, "32"], [T0 + 120, "0"]]},
                                           {"metric": b, "values": [[T0, "-3"], [T0 + 60, "16"]]})
    prom.answers[q["tpot_sum"]] = matrix({"metric": a, "values": [[T0, "120"], [T0 + 60, "60"], [T0 + 120, "0"]]},
                                         {"metric": b, "values": [[T0, "25"], [T0 + 60, "25"]]})
    # a: 3,000 and 2,000 tokens a second, none at T0 + 120 (0 over 0: no time per token); b's count lost at T0 + 60.
    prom.answers[q["tpot_count"]] = matrix({"metric": a, "values": [[T0, "3000"], [T0 + 60, "2000"], [T0 + 120, "0"]]},
                                           {"metric": b, "values": [[T0, "1000"]]})
    prom.answers[q["ttft_sum"]] = matrix({"metric": a, "values": [[T0, "6"], [T0 + 60, "4"]]})
    prom.answers[q["ttft_count"]] = matrix({"metric": a, "values": [[T0, "12"], [T0 + 60, "8"]]})
    prom.answers[q["ttft_bucket"]] = matrix(
        {"metric": {**a, "le": "0.5"}, "values": [[T0, "6"], [T0 + 60, "8"]]},
        {"metric": {**a, "le": "1.0"}, "values": [[T0, "12"], [T0 + 60, "8"]]},
        {"metric": {**a, "le": "+Inf"}, "values": [[T0, "12"], [T0 + 60, "8"]]},
    )


def test_the_pull_joins_them_to_the_rates_and_quarantines_a_sum_without_its_count():
    repo = sqlite_memory_repository()
    with fake_prometheus() as prom:
        _answers(prom)
        parsed = pull_prometheus(prom.url, rate_query(), T0, T0 + 120, 60, serving=serving_ask(("instance",), "1m", None, 0.5))
        report = ingest_parsed(repo, parsed, IngestSettings(now_ts=NOW))
    assert report.stored == 3
    assert report.reasons == {"negative:batch_mean": 1, "no-count:tpot_s": 1}
    q = quarantined(repo.engine)
    raw = q[q["reason"] == "no-count:tpot_s"].iloc[0]["raw_text"]  # the record as pulled, for the operator
    assert "b:8000" in raw and str(T0 + 60) in raw
    got = repo.serving_samples(T0, T0 + 3600)
    rows = {int(t): (float(b), float(tp), float(tf), float(ok)) for t, b, tp, tf, ok in
            zip(got["ts"], got["batch_mean"], got["tpot_s"], got["ttft_s"], got["ttft_ok_share"])}
    assert rows[T0] == pytest.approx((64, 0.04, 0.5, 0.5))
    assert rows[T0 + 60] == pytest.approx((32, 0.03, 0.5, 1.0))
    assert rows[T0 + 120][0] == 0 and all(math.isnan(v) for v in rows[T0 + 120][1:])  # idle: a batch of 0, no times


def test_without_the_serving_ask_the_pull_is_as_before():
    with fake_prometheus() as prom:
        _answers(prom)
        parsed = pull_prometheus(prom.url, rate_query(), T0, T0 + 120, 60)
        asked = {r.query for r in prom.requests}
    (piece,) = list(parsed.batches(100))
    assert set(piece.columns) == {"card_id", "ts", "tokens_per_s"}
    assert asked == {rate_query()}
