"""`fleet replay`'s rough edges and the CLI's conventions: each case is the command, its exit status and first line."""

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

from fleet.core.month import draw_month
from fleet.presets import load_preset


def fleet(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


# -- conventions ---------------------------------------------------------------------------------------------------

def test_version_prints_the_installed_version():
    p = fleet("--version")
    assert p.returncode == 0, p.stderr
    assert first_line(p.stdout) == f"fleet {version('fleet-autoscaler')}"


@pytest.mark.parametrize("args", [["-h"], ["replay", "-h"], ["journal", "-h"], ["classes", "-h"]])
def test_dash_h_is_help(args):
    p = fleet(*args)
    assert p.returncode == 0, p.stderr
    assert "Usage: fleet" in p.stdout and "--help" in p.stdout and "Traceback" not in p.stderr


def test_flags_show_no_bool_type_and_options_keep_theirs():
    out = fleet("replay", "--help").stdout
    assert "<bool>" not in out
    assert "<str>" in out and "<int>" in out  # options that take a value still say what value


def test_shell_completion_is_offered():
    assert "--install-completion" in fleet("--help").stdout
    p = fleet("--show-completion", "bash")
    assert p.returncode == 0 and "complete" in p.stdout


def test_an_unknown_option_of_a_command_is_a_usage_error_not_a_traceback():
    p = fleet("replay", "-x")
    assert p.returncode == 2 and "fleet: error: fleet replay: no such option: -x" in p.stderr and "Traceback" not in p.stderr


# -- --export --------------------------------------------------------------------------------------------------------

def test_export_to_a_file_is_one_line_before_any_work(tmp_path):
    target = tmp_path / "afile"
    target.write_text("mine\n")
    p = fleet("replay", "-p", "noise-evictor", "--export", str(target))
    assert p.returncode == 2
    assert p.stderr.strip() == f"fleet: error: --export {target}: is a file, not a folder"
    assert p.stdout == "" and target.read_text() == "mine\n"


def test_export_where_nothing_can_be_written_is_one_line():
    p = fleet("replay", "-p", "noise-evictor", "--export", "/proc/fleet-no-such/out")
    assert p.returncode == 2
    assert first_line(p.stderr).startswith("fleet: error: --export /proc/fleet-no-such/out: cannot write files there")
    assert len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""


def test_seeds_with_export_writes_each_seed_and_the_spread(tmp_path):
    p = fleet("replay", "-p", "noise-evictor", "--seeds", "2", "--export", str(tmp_path / "out"), "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    spread = json.loads((tmp_path / "out" / "spread.json").read_text())
    assert got["seeds"] == spread["seeds"] == [56, 57]
    assert got["spread"]["bill_usd"]["median"] == pytest.approx(spread["spread"]["bill_usd"]["median"], abs=0.005)
    bills = [json.loads((tmp_path / "out" / f"seed-{s}" / "summary.json").read_text())["bill_usd"] for s in (56, 57)]
    assert got["spread"]["bill_usd"]["min"] == pytest.approx(min(bills), abs=0.01)
    assert (tmp_path / "out" / "seed-57" / "evictions.csv").exists()


# -- flags that were ignored, errors that blamed the wrong input -----------------------------------------------------

def test_all_with_fix_replays_every_fix_only():
    p = fleet("replay", "--all", "--fix", "--json")
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout)
    from fleet.presets import preset_names

    assert [r["fix"] for r in runs] == [True] * len(preset_names())
    assert sorted(r["preset"] for r in runs) == preset_names()
    assert {"bargain-shortfall", "golden-idler", "noise-evictor"} <= set(preset_names())


def test_a_negative_seed_is_blamed_on_the_option():
    p = fleet("replay", "-p", "noise-evictor", "--seed", "-1")
    assert p.returncode == 2
    assert p.stderr.strip() == "fleet: error: --seed -1: a seed is a whole number, 0 or more"


def test_a_directory_given_as_a_preset_says_so(tmp_path):
    p = fleet("replay", "-p", str(tmp_path))
    assert p.returncode == 2
    assert p.stderr.strip() == f"fleet: error: preset file {str(tmp_path)!r}: is a directory, not a TOML file"


@pytest.mark.parametrize(
    "assignment, reason",
    [
        ("classes.flagship.pool_cards=abc", "should be a whole number, got 'abc'"),
        ("policy.window=fortnight", "unknown window 'fortnight'"),
    ],
)
def test_a_bad_set_value_is_one_line_naming_the_set(assignment, reason):
    p = fleet("replay", "-p", "noise-evictor", "--set", assignment)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fleet: error: --set {assignment}: {reason}")
    assert "Tuple should have" not in p.stderr and "preset file" not in p.stderr


def test_the_headline_follows_the_policy_replayed():
    told = first_line(fleet("replay", "-p", "noise-evictor").stdout)
    assert told.startswith("noise-evictor: 32 flagship cards judged through the hour window")
    p = fleet("replay", "-p", "noise-evictor", "--set", "policy.eviction.window=day")
    assert p.returncode == 0, p.stderr
    line = first_line(p.stdout)
    assert line.startswith("noise-evictor with --set policy.eviction.window=day: 32 flagship cards judged through the day window")
    assert "hour window" not in p.stdout.split("policy:")[0]


def test_json_dollars_are_to_the_cent():
    p = fleet("replay", "-p", "bargain-shortfall", "--json")
    assert '"bill_usd": 28840.0,' in p.stdout and "28839.99" not in p.stdout


# -- a stored month shorter than warm-up + month ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_month(tmp_path_factory):
    """500 hours of the noise evictor's telemetry (the preset asks 168 + 720), as a file and in a store."""
    from tests.ingest.test_store_month import write_month_telemetry

    d = tmp_path_factory.mktemp("short")
    scenario = load_preset("noise-evictor").resolve().model_copy(update={"hours": 400, "warmup_hours": 100})
    write_month_telemetry(d / "short.csv", draw_month(scenario))
    url = f"sqlite:///{d / 'short.db'}"
    p = fleet("ingest", str(d / "short.csv"), "--db", url, "--class", "flagship")
    assert p.returncode == 0, p.stderr
    return d, url


def test_a_short_telemetry_file_replays_the_hours_it_holds(short_month):
    d, _ = short_month
    p = fleet("replay", "-p", "noise-evictor", "--telemetry", str(d / "short.csv"), "--json")
    assert p.returncode == 0, p.stderr
    f = json.loads(p.stdout)
    # The hour window is the longest the policy reads after the day window: a day of warm-up, the rest replayed.
    assert (f["stored_hours"], f["warmup_hours"], f["hours"]) == (500, 24, 476)
    assert first_line(p.stderr) == (f"fleet: note: {d / 'short.csv'}: 476 hours after a warm-up of 24, all the store "
                                    "holds (500 hours; the preset asks 168 + 720)")


def test_a_short_store_names_the_store_not_a_seed(short_month):
    _, url = short_month
    p = fleet("replay", "-p", "noise-evictor", "--db", url)
    assert p.returncode == 0, p.stderr
    assert first_line(p.stdout).startswith(f"noise-evictor on the month stored at {url}: 32 flagship cards")
    assert "seed 56" not in p.stdout and f"store {url}: 476 hours after a warm-up of 24" in " ".join(p.stdout.split())


def test_replay_of_a_store_that_is_not_there_creates_nothing(tmp_path):
    p = fleet("replay", "-p", "noise-evictor", "--db", f"sqlite:///{tmp_path / 'typo.db'}")
    assert p.returncode == 2
    assert first_line(p.stderr) == f"fleet: error: database 'sqlite:///{tmp_path / 'typo.db'}': no such file; no store there (nothing was created)"
    assert list(tmp_path.iterdir()) == []


def test_a_short_stored_month_bills_its_hours_share_of_the_rent(short_month):
    # A monthly rent pays for the preset's 720 hours: 476 replayed hours bill 476/720 of a month per warm card,
    # not a whole month's rent spread over them.
    d, _ = short_month
    p = fleet("replay", "-p", "noise-evictor", "--telemetry", str(d / "short.csv"), "--json")
    assert p.returncode == 0, p.stderr
    f = json.loads(p.stdout)
    warm_card_hours = f["cards_warm_avg"] * f["hours"]
    assert f["bill_warm_usd"] == pytest.approx(warm_card_hours * 2690 / 720, rel=1e-6, abs=0.01)
