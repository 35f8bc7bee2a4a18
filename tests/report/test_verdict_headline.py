"""The verdict's headline follows the month and policy replayed; dollars print to the cent and only at output."""

import pytest

from fleet.presets import StoredSpan, load_preset, replay_scenario, resolve_scenario
from fleet.report.export import cents
from fleet.report.verdict import headline


@pytest.fixture(scope="module")
def evictor():
    return load_preset("noise-evictor")


def test_the_story_heads_the_preset_as_told(evictor):
    for seed in (None, evictor.scenario.seed):
        r = replay_scenario(evictor.resolve(seed=seed))
        assert headline(evictor, False, r) == f"noise-evictor: {evictor.scenario.story}"


def test_another_seed_is_headed_by_its_seed_and_policy_not_the_storys_figures():
    idler = load_preset("golden-idler")
    r = replay_scenario(idler.resolve(seed=7))
    line = headline(idler, False, r)
    assert "26" in idler.scenario.story and "26" not in line  # seed 7 keeps 25 cards warm, not the story's 26
    assert line == "golden-idler, seed 7: 40 flagship cards sized through the day window in held mode, no eviction"


def test_a_set_that_changes_the_policy_replaces_the_story(evictor):
    over = ["policy.eviction.window=day"]
    r = replay_scenario(resolve_scenario(evictor, overrides=over))
    line = headline(evictor, False, r, over)
    assert line.startswith("noise-evictor with --set policy.eviction.window=day: 32 flagship cards judged through the day window")
    assert "hour window" not in line


def test_a_set_to_the_value_already_there_keeps_the_story(evictor):
    over = ["policy.window=day"]  # the preset's own sizing window
    r = replay_scenario(resolve_scenario(evictor, overrides=over))
    assert headline(evictor, False, r, over) == f"noise-evictor: {evictor.scenario.story}"


def test_a_preset_without_eviction_is_told_as_sized_not_judged():
    p = load_preset("golden-idler")
    over = ["policy.mode=steady"]
    r = replay_scenario(resolve_scenario(p, overrides=over))
    assert headline(p, False, r, over) == ("golden-idler with --set policy.mode=steady: 40 flagship cards sized through the "
                                          "day window in steady mode, no eviction")


def test_a_stored_month_is_named_by_its_store(evictor):
    r = replay_scenario(evictor.resolve().model_copy(update={"hours": 476, "warmup_hours": 24}))
    line = headline(evictor, False, r, source="sqlite:///pool.db")
    assert line.startswith("noise-evictor on the month stored at sqlite:///pool.db: 32 flagship cards judged through the hour window")


def test_the_stored_span_says_how_much_warm_up_it_took():
    span = StoredSpan(500, 24, 476, 168, 720)
    assert span.is_short
    assert span.describe() == "476 hours after a warm-up of 24, all the store holds (500 hours; the preset asks 168 + 720)"
    assert not StoredSpan(None, 168, 720, 168, 720).is_short


def test_cents_rounds_dollars_only():
    figures = {"bill_usd": 28839.999999999993, "convergence": 1.1698701648944372, "tokens_per_usd": 5781412.638,
               "spread": {"bill_usd": {"median": 54613.99999999}}, "bill_churn_usd": 0.0, "evictions": 12}
    assert cents(figures) == {"bill_usd": 28840.0, "convergence": 1.1698701648944372, "tokens_per_usd": 5781412.638,
                              "spread": {"bill_usd": {"median": 54614.0}}, "bill_churn_usd": 0.0, "evictions": 12}
