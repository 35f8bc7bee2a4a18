"""fleet compare under a promise: what a policy sizes to and the promise itself as axes, the fourth check in every
row, and a promise the pool cannot keep refused in one line."""

import json

import pytest

from tests.cli.test_cli import fleet


def test_sizing_to_throughput_and_to_the_promise_side_by_side():
    p = fleet("compare", "-p", "chat-latency", "--size-to", "throughput,promise", "--months", "3", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["size_to"]: r for r in json.loads(p.stdout)}
    assert set(rows) == {"throughput", "promise"}
    assert all(r["stream_tps"] == 30.0 and r["ttft_ms"] == 2000.0 for r in rows.values())
    # The fluid is served either way; only the run set sized to the promise keeps it.
    assert rows["throughput"]["pass_rate"]["latency"] == 0.0 and rows["promise"]["pass_rate"]["latency"] == 1.0
    assert rows["promise"]["bill_usd"]["median"] > rows["throughput"]["bill_usd"]["median"]
    assert rows["promise"]["recommendation"] == "best"


def test_the_promise_as_an_axis_prices_each_floor():
    p = fleet("compare", "-p", "chat-latency", "--set", "policy.size_to=promise", "--stream-tps", "20,30,40",
              "--months", "2", "--json")
    assert p.returncode == 0, p.stderr
    bills = {r["stream_tps"]: r["bill_usd"]["median"] for r in json.loads(p.stdout)}
    assert bills[20.0] < bills[30.0] < bills[40.0]  # a faster stream leaves each card a smaller batch


@pytest.mark.parametrize(("args", "reason"), [
    (["-p", "chat-latency", "--size-to", "fast"], "--size-to 'fast': 'fast' is not one of promise, throughput"),
    (["-p", "chat-latency", "--stream-tps", "60"], "slo.stream_tps 60: no card of class 'h100-70b' meets it even at batch 1"),
    (["-p", "golden-idler", "--stream-tps", "30"], "a promise needs its [classes.serving] curve"),
    (["-p", "chat-latency", "--ttft-ms", "-5"], "--ttft-ms '-5': -5 is outside"),
    (["-p", "chat-latency", "--ttft-ms", "100"], "slo.ttft_ms 100: a prompt's prefill alone takes 210 ms"),
])
def test_a_promise_that_cannot_be_judged_is_one_line_and_exit_2(args, reason):
    p = fleet("compare", *args, "--months", "2", check=False)
    assert p.returncode == 2 and reason in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr



def test_a_batch_its_memory_cannot_hold_is_one_line_naming_the_class_and_nothing_else(tmp_path):
    from fleet.presets import PRESETS_DIR

    text = (PRESETS_DIR / "chat-latency.toml").read_text()
    text = text.replace("alpha_ms = 20.9", "memory_bandwidth_tb_s = 3.35\nweight_gb = 70\nkv_cache_gb_per_stream = 0.4"
                        "\nmemory_gb = 80").replace("beta_ms = 0.227", "")
    pool = tmp_path / "chat-80gb.toml"
    pool.write_text(text)
    p = fleet("replay", "-p", str(pool), check=False)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"fleet: error: preset file '{pool}': classes.0.serving: batch 128 needs 121.2 GB of "
                                "weights and cache; the card's memory_gb 80 holds a batch of 24")
