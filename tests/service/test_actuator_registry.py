"""Actuators by name: `[actuator] kind` is looked up in one registry, which builds it from its own table
`[actuator.NAME]`, whose settings model says what the table must give; the actuator gives `fleet serve --check` its
line; an unknown kind names the known ones; keys written flat in `[actuator]`, the old way, still read."""

from __future__ import annotations

import pytest

from fleet.core.errors import ConfigError, MovedKey
from fleet.service.actuators import ACTUATORS, Command, DryRun, Webhook, make_actuator
from fleet.service.config import load_service_config


def _table(tmp_path, body: str):
    (tmp_path / "fleet.toml").write_text(body)
    return load_service_config(tmp_path / "fleet.toml").actuator


@pytest.mark.parametrize(
    "body, built, check",
    [
        ("", DryRun, (True, "dry-run")),
        ('[actuator]\nkind = "command"\n[actuator.command]\ncommand = ["sh", "-c", "true"]\n', Command, None),
        ('[actuator]\nkind = "webhook"\n[actuator.webhook]\nurl = "https://tok3n@hooks.example/act"\n', Webhook,
         (True, "webhook to https://***@hooks.example/act")),
    ],
)
def test_each_kind_is_built_and_checked_from_its_table(tmp_path, body, built, check):
    table = _table(tmp_path, body)
    actuator = make_actuator(table.kind, table.own)
    assert isinstance(actuator, built) and table.kind in ACTUATORS
    ok, line = actuator.check()
    if check is not None:
        assert (ok, line) == check
    else:
        assert ok and line.startswith("command 'sh': /")


@pytest.mark.parametrize(
    "body, said",
    [
        ('[actuator]\nkind = "carrier-pigeon"\n', "kind 'carrier-pigeon': not an actuator (one of command, dry-run, webhook)"),
        ('[actuator]\nkind = "command"\n', "actuator.command: the command actuator needs command = [program, args...]"),
        ('[actuator]\nkind = "webhook"\n[actuator.webhook]\nurl = "ftp://x"\n', "actuator.webhook: the webhook actuator needs url = 'http(s)://...'"),
        ('[actuator.command]\ncommand = ["true"]\ntimeout_s = 0\n', "actuator.command.timeout_s: Input should be greater than 0"),
        ('[actuator.carrier-pigeon]\nroost = "loft"\n', "actuator.carrier-pigeon: unknown key"),
    ],
)
def test_a_table_that_cannot_serve_its_kind_is_one_error(tmp_path, body, said):
    with pytest.raises(ConfigError) as err:
        _table(tmp_path, body)
    assert said in str(err.value)


def test_flat_keys_of_the_old_table_are_moved_to_the_chosen_actuator_with_one_line(tmp_path):
    old = '[actuator]\nkind = "command"\ncommand = ["sh", "-c", "true"]\ntimeout_s = 5\nmax_retry_s = 60\n'
    new = '[actuator]\nkind = "command"\nmax_retry_s = 60\n[actuator.command]\ncommand = ["sh", "-c", "true"]\ntimeout_s = 5\n'
    with pytest.warns(MovedKey) as told:
        moved = _table(tmp_path, old)
    assert [str(w.message) for w in told] == [
        "actuator.command, actuator.timeout_s are deprecated: write them in [actuator.command]"]
    assert moved.own == _table(tmp_path, new).own and moved.max_retry_s == 60
    command = make_actuator(moved.kind, moved.own)
    assert (tuple(command.argv), command.timeout_s) == (("sh", "-c", "true"), 5.0)
