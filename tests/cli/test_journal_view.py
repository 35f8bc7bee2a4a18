"""`fleet journal` and `fleet explain` as a person reads them: reasons with grouped figures, stacked at 80 columns,
`--since 1d` counted back from a simulated store's own clock, and an eviction counted as a leaving."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.cli.test_terminal_80x24 import cuts, in_terminal, lines_wider_than
from tests.service.serving import TINY_PRESET

FLEET = [sys.executable, "-m", "fleet.cli.app"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny preset's month served in process on a simulated clock through two eviction passes."""
    from fleet.presets import load_preset
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config
    from storage.repository import open_repository

    d = tmp_path_factory.mktemp("served-journal")
    (d / "tiny.toml").write_text(TINY_PRESET)
    scenario = load_preset(str(d / "tiny.toml")).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    svc = Service(cfg, open_repository(f"sqlite:///{d / 'served.db'}"), SimClock(cfg.month.start_ts, 1e9),
                  simulation=Simulation.of(scenario, cfg.month.start_ts))
    for _ in range(50):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    svc.telemetry.engine.dispose()
    return f"sqlite:///{d / 'served.db'}"


def fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=300)


def _evictions(url: str) -> list[dict]:
    p = fleet("journal", "--db", url, "--kind", "evict", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_reasons_print_their_figures_grouped(served):
    evictions = _evictions(served)
    assert evictions and any(re.search(r"\b\d{4,}\b", e["reason"]) for e in evictions)  # as journaled: 5853
    p = fleet("journal", "--db", served, "--kind", "evict")
    assert p.returncode == 0, p.stderr
    assert re.search(r"threshold \d,\d{3} tok/s \(median \d,\d{3}\)", " ".join(p.stdout.split()))
    assert not re.search(r"(?<![\d,.:T-])\d{4,}(?![\d:Z-])", p.stdout.replace("\n", " ")), p.stdout


def test_since_a_span_counts_back_from_a_simulated_stores_clock(served):
    kinds = [a for k in ("evict", "add", "release", "size", "eviction-pass") for a in ("--kind", k)]
    everything = json.loads(fleet("journal", "--db", served, *kinds, "--json", "--limit", "1000").stdout)
    newest = max(e["ts"] for e in everything)  # the simulated clock's last hour, years before the wall clock's
    p = fleet("journal", "--db", served, *kinds, "--since", "1d", "--json", "--limit", "1000")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got and [e["id"] for e in got] == [e["id"] for e in everything if e["ts"] >= newest - 86_400]


def test_explain_counts_an_eviction_as_leaving_the_run_set(served):
    card = _evictions(served)[0]["card"]
    p = fleet("explain", card, "--db", served)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "it joined the run set" in ln)
    assert "left it 0 times" not in line
    assert re.search(r"left it \d+ times? \(1 by eviction\)$", line), line


def test_the_journal_stacks_its_reasons_at_80_columns(served):
    rc, text = in_terminal("journal", "--db", served, "--limit", "6")
    assert rc == 0, text[-800:]
    assert cuts(text) == [] and lines_wider_than(text, 80) == []
    heads = [ln for ln in text.splitlines() if re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ  \w", ln)]
    reasons = [ln for ln in text.splitlines() if ln.startswith("    ") and ln.strip()]
    assert len(heads) == 6
    assert min(len(ln.rstrip()) for ln in reasons[:3]) > 17  # no reason squeezed into a narrow column
    assert max(len(ln.rstrip()) for ln in reasons) > 60
