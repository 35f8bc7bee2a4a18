"""/metrics from each card's fitted curve (`fleet.service.curves`): its measured stream speed, its fitted step, and
the share of first tokens within the promise's time; the fast text the same as prometheus-client's, the names by
the module's rule, and no series where nothing was measured."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fleet.core.curve_fit import fit_step_curves
from fleet.service.curves import CardCurves
from fleet.service.metrics import FleetCollector
from fleet.service.pool import PoolIndex
from tests.service.test_metrics import families, parsed, reference_text, same_values, sample, snapshot, stats

ODD = 'gpu-"q"\\x\nz'  # a card id needing every escape of the text format


def curves() -> CardCurves:
    keys = ["gpu-a", "gpu-b", ODD, "gpu-silent"]
    index = PoolIndex.build({"flagship": SimpleNamespace(rent_usd_per_month=2690.0)},
                            [SimpleNamespace(card_key=k, class_name="flagship", id=i + 1) for i, k in enumerate(keys)], 720)
    batch = np.tile(np.arange(8.0, 72.0, 8.0), 3)
    card = np.repeat([0, 1, 2], 8)
    step = np.where(card == 1, 1.25, 1.0) * (0.02 + 0.00025 * batch)
    fitted = fit_step_curves(card, batch, step, 4)
    return CardCurves(index, 1_767_232_800, fitted, stream_tps=np.array([40.0, 32.0, 1e-3, np.nan]),
                      ttft_ok_share=np.array([1.0, 0.5, np.nan, np.nan]), rate_at_promise_tps=fitted.rate_at_floor_tps(30))


def test_each_card_with_a_curve_has_its_stream_speed_and_step():
    fams, _ = families(snap=snapshot(curves=curves()))
    stream = {s.labels["card"]: s.value for s in fams["fleet_card_stream_tps"].samples}
    assert stream == {"gpu-a": 40.0, "gpu-b": 32.0, ODD: 1e-3}  # the card with nothing measured has no series
    alpha = {s.labels["card"]: s.value for s in fams["fleet_card_step_alpha_seconds"].samples}
    beta = {s.labels["card"]: s.value for s in fams["fleet_card_step_beta_seconds"].samples}
    assert alpha["gpu-a"] == pytest.approx(0.02) and alpha["gpu-b"] == pytest.approx(0.025)
    assert beta["gpu-b"] == pytest.approx(0.0003125)
    assert fams["fleet_slo_attainment_ratio"].samples[0].value == pytest.approx(0.75)
    for name in ("fleet_card_stream_tps", "fleet_card_step_alpha_seconds", "fleet_card_step_beta_seconds",
                 "fleet_slo_attainment_ratio"):  # the module's naming rule: a base unit at the end
        assert fams[name].type == "gauge" and name.endswith(("_tps", "_seconds", "_ratio"))


def test_without_curves_there_is_no_such_series():
    fams, _ = families()
    assert not {"fleet_card_stream_tps", "fleet_card_step_alpha_seconds", "fleet_slo_attainment_ratio"} & set(fams)


def test_the_fast_text_is_prometheus_clients():
    coll = FleetCollector(lambda: snapshot(curves=curves()), stats, quarantine_reasons=("unknown-card",))
    fast = coll.exposition().decode()
    ref = reference_text(coll)
    assert fast == ref
    assert same_values(parsed(fast), parsed(ref))


def test_the_pool_s_expected_first_token_wait_is_exported_beside_the_curves():
    fams, text = families(snap=snapshot(curves=curves(), pool_ttft_s=0.42))
    assert sample(fams, "fleet_pool_ttft_seconds") == 0.42
    beyond, _ = families(snap=snapshot(pool_ttft_s=float("inf")))
    assert sample(beyond, "fleet_pool_ttft_seconds") == float("inf")  # the slots cannot carry the requests
    none, _ = families(snap=snapshot())
    assert math.isnan(sample(none, "fleet_pool_ttft_seconds"))  # no first-token promise sized to


def test_the_dashboard_s_promise_panel_reads_what_a_pool_under_a_promise_exports():
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    fams, _ = families(snap=snapshot(curves=curves(), pool_ttft_s=0.42))
    exported = {s.name for f in fams.values() for s in f.samples}
    (panel,) = [p for p in dash["panels"] if "promise" in p["title"]]
    used = {m for t in panel["targets"] for m in re.findall(r"fleet_[a-z_]+", t["expr"])}
    assert {"fleet_card_stream_tps", "fleet_pool_ttft_seconds", "fleet_slo_attainment_ratio"} <= used <= exported
