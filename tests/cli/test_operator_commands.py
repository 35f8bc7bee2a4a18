"""`fleet journal`, `fleet quarantine` and `fleet classes`: what an operator asks of the store and the market."""

import json
import subprocess
import sys

import pytest

from tests.cli.served_month import serve_tiny_month


def fleet(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd, env=env)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny preset's month served in process on a simulated clock: a store with a whole month's journal."""
    month = serve_tiny_month(tmp_path_factory.mktemp("served"))
    return month.url, month.service.journal_store.decisions()


# -- fleet journal ---------------------------------------------------------------------------------------------------

def test_journal_lists_the_actions_newest_first_with_reason_and_acted(served):
    url, rows = served
    p = fleet("journal", "--db", url, "--json", "--limit", "100000")
    assert p.returncode == 0, p.stderr
    events = json.loads(p.stdout)
    actions = [r for r in rows if r.kind in ("evict", "add", "release")]
    assert len(events) == len(actions) > 0
    assert [e["id"] for e in events] == [r.id for r in sorted(actions, key=lambda r: (r.ts, r.id), reverse=True)]
    assert all(e["reason"] and isinstance(e["acted"], bool) for e in events)
    assert {e["kind"] for e in events} == {"evict", "add", "release"}


def test_journal_filters_by_kind_card_and_time(served):
    url, rows = served
    evictions = [r for r in rows if r.kind == "evict"]
    got = json.loads(fleet("journal", "--db", url, "--kind", "evict", "--json").stdout)
    assert [e["card"] for e in got] == [r.card_key for r in reversed(evictions)] and len(got) == 3
    card = evictions[0].card_key
    mine = json.loads(fleet("journal", "--db", url, "--card", card, "--kind", "evict", "--kind", "add", "--json").stdout)
    assert mine and {e["card"] for e in mine} == {card}
    late = json.loads(fleet("journal", "--db", url, "--since", str(evictions[-1].ts), "--kind", "evict", "--json").stdout)
    assert [e["id"] for e in late] == [r.id for r in evictions if r.ts >= evictions[-1].ts][::-1]


def test_journal_text_is_one_line_an_event(served):
    url, rows = served
    p = fleet("journal", "--db", url, "--kind", "evict")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].split() == ["time", "kind", "card", "acted", "reason"]
    newest = [r for r in rows if r.kind == "evict"][-1]
    assert newest.card_key in lines[1] and "evict" in lines[1]


@pytest.mark.parametrize("args, line", [
    (["--kind", "reboot"], "fleet: error: --kind reboot: not a decision kind (one of evict, add, release, act-failed, act-expired, reconcile, retire, demand-correction, size, eviction-pass)"),
    (["--since", "yesterday"], "fleet: error: --since 'yesterday': expected an ISO 8601 time (2026-11-02T06:00), Unix seconds, or a span ago (24h, 7d)"),
])
def test_journal_bad_filters_are_one_line(served, args, line):
    p = fleet("journal", "--db", served[0], *args)
    assert p.returncode == 2 and p.stderr.strip() == line


@pytest.mark.parametrize("command", ["journal", "quarantine"])
def test_a_store_that_is_not_there_is_named_masked_and_not_created(tmp_path, command):
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    p = fleet(command, "--db", url)
    assert p.returncode == 2
    assert p.stderr.strip() == f"fleet: error: database {url!r}: no such file; no store there (nothing was created)"
    assert list(tmp_path.iterdir()) == []


def test_a_server_url_is_shown_with_its_password_masked(tmp_path):
    p = fleet("journal", "--db", "postgresql+psycopg://fleet:hunter2@127.0.0.1:1/x")
    assert p.returncode == 2 and "hunter2" not in p.stderr + p.stdout
    assert first_line(p.stderr).startswith("fleet: error: database 'postgresql+psycopg://fleet:***@127.0.0.1:1/x'")


def test_the_store_url_may_come_from_fleet_db(served, tmp_path):
    import os

    p = fleet("journal", "--kind", "evict", "--json", cwd=tmp_path, env={**os.environ, "FLEET_DB": served[0]})
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)) == 3 and list(tmp_path.iterdir()) == []


# -- fleet quarantine ------------------------------------------------------------------------------------------------

BAD = """card_id,ts,tokens_per_s
gpu-1,1700000000,5000
gpu-1,1700003600,fast
gpu-2,1700000000,5100,extra
gpu-2,1700003600,-4
"""


@pytest.fixture(scope="module")
def quarantined(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.csv").write_text(BAD)
    url = f"sqlite:///{d / 'q.db'}"
    fleet("ingest", str(d / "bad.csv"), "--db", url, "--class", "flagship")
    return d, url


def test_quarantine_lists_file_line_reason_and_raw_text(quarantined):
    d, url = quarantined
    p = fleet("quarantine", "--db", url, "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [(r["line"], r["raw_text"]) for r in got] == [(3, "gpu-1,1700003600,fast"), (4, "gpu-2,1700000000,5100,extra"),
                                                         (5, "gpu-2,1700003600,-4")]
    assert {r["source"] for r in got} == {str(d / "bad.csv")}
    assert got[1]["reason"] == "malformed-line" and got[0]["reason"].startswith("unparseable")


def test_quarantine_filters_by_reason_family_and_source(quarantined):
    d, url = quarantined
    by_reason = json.loads(fleet("quarantine", "--db", url, "--reason", "malformed-line", "--json").stdout)
    assert [r["line"] for r in by_reason] == [4]
    family = json.loads(fleet("quarantine", "--db", url, "--reason", "unparseable", "--json").stdout)
    assert [r["line"] for r in family] == [3]
    assert len(json.loads(fleet("quarantine", "--db", url, "--source", "bad.csv", "--json").stdout)) == 3
    assert json.loads(fleet("quarantine", "--db", url, "--source", "other.csv", "--json").stdout) == []


def test_quarantine_text_keeps_the_raw_text_as_written(quarantined):
    p = fleet("quarantine", "--db", quarantined[1], "--reason", "malformed-line")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[0].split() == ["file", "line", "reason", "raw", "text"]
    assert "gpu-2,1700000000,5100,extra" in p.stdout


# -- fleet classes ---------------------------------------------------------------------------------------------------

def test_classes_of_a_preset_with_tokens_per_dollar():
    p = fleet("classes", "-p", "bargain-shortfall", "--json")
    assert p.returncode == 0, p.stderr
    got = {c["class"]: c for c in json.loads(p.stdout)}
    assert got["flagship"]["rated_tps"] == 6000 and got["flagship"]["rent_usd_per_month"] == 2690
    assert got["flagship"]["tokens_per_usd"] == pytest.approx(6000 * 3600 / (2690 / 720))
    assert got["bargain"]["pool_cards"] == 20


def test_classes_of_a_pool_file_from_serving_arithmetic(tmp_path):
    (tmp_path / "pool.toml").write_text(
        '[[classes]]\nname = "h100-70b"\nrent_usd_per_month = 2690\n\n'
        "[classes.serving]\nmemory_bandwidth_tb_s = 3.35\nweight_gb = 70\nbatch = 16\n"
    )
    got = json.loads(fleet("classes", "--pool", str(tmp_path / "pool.toml"), "--json").stdout)[0]
    assert round(got["serving"]["stream_tps"]) == 48 and round(got["rated_tps"]) == 766
    text = fleet("classes", "--pool", str(tmp_path / "pool.toml"))
    assert text.returncode == 0, text.stderr
    assert "766" in text.stdout and "3.35 TB/s over 70 GB: 47.9 tok/s a stream, × batch 16" in " ".join(text.stdout.split())


def test_classes_needs_one_source():
    p = fleet("classes")
    assert p.returncode == 2 and p.stderr.strip() == "fleet: error: give one of --preset NAME or --pool FILE"


# -- fleet classes --curve -------------------------------------------------------------------------------------------

def test_classes_curve_prints_each_serving_class_and_its_knee(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text('[[classes]]\nname = "h100-70b"\nrent_usd_per_month = 2690\n'
                    '[classes.serving]\nmemory_bandwidth_tb_s = 3.35\nweight_gb = 70\nkv_cache_gb_per_stream = 0.76\n'
                    'memory_gb = 160\nbatch = 64\n\n'
                    '[[classes]]\nname = "plain"\nrated_tps = 1000\nrent_usd_per_month = 100\n')
    got = fleet("classes", "--pool", str(pool), "--curve", "--json")
    assert got.returncode == 0, got.stderr
    (h100,) = json.loads(got.stdout)  # the class with a rated_tps alone has no curve
    assert h100["class"] == "h100-70b" and h100["max_batch"] == 118  # (160 - 70) // 0.76
    assert h100["curve"][0]["batch"] == 1 and round(h100["curve"][0]["stream_tps"]) == 47
    assert h100["curve"][-1]["batch"] == 118
    text = fleet("classes", "--pool", str(pool), "--curve")
    assert text.returncode == 0 and "its memory allows a batch of 118" in text.stdout


def test_classes_curve_without_a_serving_class_is_a_usage_error():
    got = fleet("classes", "-p", "noise-evictor", "--curve")
    assert got.returncode == 2
    assert first_line(got.stderr) == ("fleet: error: preset noise-evictor: no class gives a [classes.serving] table, "
                                      "so no class has a curve (a rated_tps is one point)")


def test_classes_curve_marks_a_promise_and_draws_the_curve(tmp_path):
    pool = tmp_path / "pool.toml"
    pool.write_text('[[classes]]\nname = "h100-70b"\nrent_usd_per_month = 2690\n'
                    '[classes.serving]\nalpha_ms = 20.9\nbeta_ms = 0.227\nbatch = 128\n')
    got = fleet("classes", "--pool", str(pool), "--curve", "--stream-tps", "30", "--json")
    (row,) = json.loads(got.stdout)
    assert row["promise"]["batch"] == 54 and round(row["promise"]["share_of_rated"], 2) == 0.64
    png = tmp_path / "curve.png"
    drawn = fleet("classes", "--pool", str(pool), "--curve", "--stream-tps", "30", "--plot", str(png))
    assert drawn.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "at 30 tok/s a user: batch 54, 1,629 tok/s, 64% of the rated rate" in drawn.stdout
    bad = fleet("classes", "--pool", str(pool), "--plot", str(png))
    assert bad.returncode == 2 and first_line(bad.stderr) == "fleet: error: --plot and --stream-tps go with --curve"
