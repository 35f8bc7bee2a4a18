"""The `fleet` command: verdicts, JSON, export, and one-line errors with status 2."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

REQUIRED = {
    "preset", "fix", "hours", "demand_avg_tps", "delivered_avg_tps", "unmet_avg_tps", "cards_warm_avg",
    "cards_warm_max", "bill_usd", "bill_warm_usd", "bill_churn_usd", "idle_usd", "ideal_bill_usd",
    "convergence", "evictions", "wrong_evictions", "checks",
}


def fleet(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_replay_json_has_every_figure():
    out = json.loads(fleet("replay", "--preset", "noise-evictor", "--fix", "--json").stdout)
    assert REQUIRED <= set(out)
    assert out["fix"] is True and out["preset"] == "noise-evictor"
    assert set(out["checks"]) == {"capacity", "convergence", "eviction"}
    assert all("pass" in c for c in out["checks"].values())


def test_replay_text_verdict_names_each_check_and_its_mark():
    out = fleet("replay", "--preset", "golden-idler").stdout
    for word in ("bill", "idle cost", "delivered", "run set", "evictions", "ideal bill", "convergence", "capacity", "PASS", "FAIL"):
        assert word in out


def test_set_and_seed_change_the_month():
    a = json.loads(fleet("replay", "-p", "noise-evictor", "--json").stdout)
    b = json.loads(fleet("replay", "-p", "noise-evictor", "--json", "--seed", "7").stdout)
    c = json.loads(fleet("replay", "-p", "noise-evictor", "--json", "--set", "policy.eviction.share=0.1").stdout)
    assert a["ideal_bill_usd"] != b["ideal_bill_usd"]
    assert c["evictions"] <= 3 and c["ideal_bill_usd"] == a["ideal_bill_usd"]


def test_a_copied_preset_replays_by_path(tmp_path):
    from fleet.presets import PRESETS_DIR

    text = (PRESETS_DIR / "noise-evictor.toml").read_text().replace("avg_tps = 110000", "avg_tps = 90000")
    path = tmp_path / "mine.toml"
    path.write_text(text)
    out = json.loads(fleet("replay", "--preset", str(path), "--json").stdout)
    assert out["demand_avg_tps"] == pytest.approx(90_000)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["replay", "--preset", "no-such-preset"], "unknown preset 'no-such-preset'"),
        (["replay", "-p", "golden-idler", "--set", "policy.nope=1"], "unknown key 'policy.nope'"),
        (["replay", "-p", "golden-idler", "--set", "policy.headroom=fast"], "policy.headroom"),
        (["replay", "-p", "golden-idler", "--set", "policy.window=fortnight"], "unknown window 'fortnight'"),
        (["replay", "-p", "golden-idler", "--set", "policy.mode=lazy"], "unknown sizing mode 'lazy'"),
        (["replay", "-p", "golden-idler", "--set", "noequals"], "expected KEY=VALUE"),
        (["replay", "-p", "golden-idler", "--set", "classes.tpu.rated_tps=1"], "no card class named 'tpu'"),
        (["replay", "-p", "golden-idler", "--set", "policy.card_class=tpu"], "policy.card_class"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args, needle):
    p = fleet(*args, check=False)
    assert p.returncode == 2
    assert needle in p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "content, needle",
    [
        ("this is = = not toml", "not valid TOML"),
        ('name = "x"\n[policy]\ncard_class = "flagship"\n', "classes"),
        (b"\xff\xfe\x00bad", "not UTF-8"),
    ],
)
def test_bad_preset_file_is_one_line_and_status_2(tmp_path, content, needle):
    path = tmp_path / "bad.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    p = fleet("replay", "--preset", str(path), check=False)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and str(path) in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_export_files_add_up_to_the_summary(tmp_path):
    fleet("replay", "-p", "noise-evictor", "--export", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    cards = pd.read_csv(tmp_path / "cards.csv")
    iv = pd.read_csv(tmp_path / "intervals.csv")
    hours = pd.read_csv(tmp_path / "hours.csv")
    ev = pd.read_csv(tmp_path / "evictions.csv")
    H = summary["hours"]
    assert len(hours) == H
    rent_h = cards.set_index("card_id")["rent_usd_per_month"] / H
    warm = float(((iv.end_hour - iv.start_hour) * rent_h.loc[iv.card_id].to_numpy()).sum())
    assert warm == pytest.approx(summary["bill_warm_usd"], abs=0.005)  # summary.json: dollars to the cent
    churn = 0.15 * float(cards.set_index("card_id").loc[ev.card_id, "rent_usd_per_month"].sum())
    assert churn == pytest.approx(summary["bill_churn_usd"], abs=0.005)
    assert summary["bill_usd"] == pytest.approx(warm + churn, abs=0.01)
    assert (iv.end_reason == "evicted").sum() <= summary["evictions"]
    assert set(iv.end_reason) <= {"evicted", "released", "month_end"}
    delivered = np.minimum(hours.demand_tps, hours.capacity_tps)
    assert np.allclose(delivered, hours.delivered_tps)
    assert delivered.mean() == pytest.approx(summary["delivered_avg_tps"])
    assert hours.ideal_usd.sum() == pytest.approx(summary["ideal_bill_usd"], abs=0.005)
    idle = (hours.warm_usd * (1 - hours.delivered_tps / hours.capacity_tps)).sum()
    assert idle == pytest.approx(summary["idle_usd"], abs=0.005)
    assert summary["ideal_bill_usd"] / summary["bill_usd"] == pytest.approx(summary["convergence"])
    assert len(ev) == summary["evictions"] and int(ev.wrong.sum()) == summary["wrong_evictions"]
    assert (ev.true_tps >= ev.median_true_tps).sum() == summary["wrong_evictions"]
    # cards_warm follows from the intervals.
    counts = np.zeros(H, int)
    for s, e in zip(iv.start_hour, iv.end_hour):
        counts[s:e] += 1
    assert (counts == hours.cards_warm).all()


def test_presets_lists_each_with_its_story():
    out = fleet("presets").stdout
    for name in ("golden-idler", "noise-evictor", "bargain-shortfall"):
        assert name in out


def test_replay_of_a_telemetry_file_makes_the_presets_decisions(tmp_path):
    from fleet.presets import load_preset
    from fleet.core.month import draw_month
    from tests.ingest.test_store_month import write_month_telemetry

    src = tmp_path / "telemetry.csv"
    write_month_telemetry(src, draw_month(load_preset("noise-evictor").resolve()))
    preset = json.loads(fleet("replay", "-p", "noise-evictor", "--json", "--export", str(tmp_path / "a")).stdout)
    stored = json.loads(fleet("replay", "-p", "noise-evictor", "--json", "--telemetry", str(src), "--export", str(tmp_path / "b")).stdout)
    assert stored["source"] == str(src)
    for key in ("evictions", "cards_warm_avg", "cards_warm_max", "bill_usd", "bill_warm_usd", "bill_churn_usd"):
        assert stored[key] == pytest.approx(preset[key]), key
    a = pd.read_csv(tmp_path / "a" / "evictions.csv")
    b = pd.read_csv(tmp_path / "b" / "evictions.csv")
    assert list(zip(a.hour, a.card_id)) == list(zip(b.hour, b.card_id))


def test_replay_of_a_missing_telemetry_file_is_one_line(tmp_path):
    p = fleet("replay", "-p", "noise-evictor", "--telemetry", str(tmp_path / "nope.csv"), check=False)
    assert p.returncode == 2 and "nope.csv" in p.stderr and "Traceback" not in p.stderr


def test_export_under_a_promise_adds_goodput_hour_by_hour(tmp_path):
    pool = tmp_path / "chat.toml"
    pool.write_text(
        'name = "chat"\nseed = 3\nhours = 96\nwarmup_hours = 48\n'
        '[[classes]]\nname = "h100"\nrent_usd_per_month = 2690\npool_cards = 12\n'
        '[classes.serving]\nalpha_ms = 20.9\nbeta_ms = 0.227\nbatch = 128\nparams_b = 70\neffective_tflops = 400\n'
        '[demand]\nshape = "diurnal"\navg_tps = 9000\noutput_tokens_per_request = 250\nprompt_tokens_per_request = 600\n'
        '[policy]\ncard_class = "h100"\nheadroom = 1.5\nforecast = "seasonal"\n'
        '[slo]\nstream_tps = 25\nttft_ms = 1500\n')
    out = tmp_path / "out"
    got = subprocess.run([sys.executable, "-m", "fleet.cli.app", "replay", "-p", str(pool), "--export", str(out)],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    summary = json.loads((out / "summary.json").read_text())
    hours = pd.read_csv(out / "hours.csv")
    assert hours.goodput_tps.mean() == pytest.approx(summary["goodput_avg_tps"])
    assert (hours.goodput_tps <= np.minimum(hours.delivered_tps, hours.rate_at_promise_tps) + 1e-6).all()
    assert hours.goodput_tps.sum() / hours.delivered_tps.sum() == pytest.approx(summary["goodput_share"])
    demand = hours.demand_tps.sum()
    assert (demand - hours.goodput_tps.sum()) / demand == pytest.approx(summary["checks"]["capacity"]["value"])
    assert summary["checks"]["latency"]["value"] == pytest.approx(summary["goodput_share"])


@pytest.mark.parametrize("command", [["compare", "--months", "2", "--share", "0.1,0.2"], ["replay"]])
def test_an_old_policy_key_is_told_once_in_one_line(command):
    """Keys at their old places still replay, each told once (however many months or reads of the preset) naming
    its new table."""
    p = fleet(command[0], "-p", "noise-evictor", *command[1:],
              "--set", "policy.eviction.fraction=0.7", "--set", "policy.release_after_hours=2")
    told = [line for line in p.stderr.splitlines() if line.strip()]
    assert sorted(told) == [
        "fleet: warning: policy.eviction.fraction is deprecated: write it in [policy.eviction.rules.below-median]",
        "fleet: warning: policy.release_after_hours is deprecated: write it in [policy.hystereses.release-after]",
    ]
