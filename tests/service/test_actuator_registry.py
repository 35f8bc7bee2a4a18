"""Actuators by name: `[actuator] kind` is looked up in one registry, which builds it, says what its table must
give, and gives `fleet serve --check` its line; an unknown kind names the known ones."""

from __future__ import annotations

import pytest

from fleet.core.errors import ConfigError
from fleet.service.actuators import ACTUATORS, make_actuator
from fleet.service.config import load_service_config
from fleet.service.journal import Command, DryRun, Webhook


def _table(tmp_path, body: str):
    (tmp_path / "fleet.toml").write_text("[actuator]\n" + body)
    return load_service_config(tmp_path / "fleet.toml").actuator


@pytest.mark.parametrize(
    "body, built, check",
    [
        ("", DryRun, (True, "dry-run")),
        ('kind = "command"\ncommand = ["sh", "-c", "true"]\n', Command, None),
        ('kind = "webhook"\nurl = "https://tok3n@hooks.example/act"\n', Webhook, (True, "webhook to https://***@hooks.example/act")),
    ],
)
def test_each_kind_is_built_and_checked_from_its_table(tmp_path, body, built, check):
    table = _table(tmp_path, body)
    assert isinstance(make_actuator(table), built)
    ok, line = ACTUATORS.get(table.kind).check(table)
    if check is not None:
        assert (ok, line) == check
    else:
        assert ok and line.startswith("command 'sh': /")


@pytest.mark.parametrize(
    "body, said",
    [
        ('kind = "carrier-pigeon"\n', "kind 'carrier-pigeon': not an actuator (one of command, dry-run, webhook)"),
        ('kind = "command"\n', "kind = 'command' needs command = [program, args...]"),
        ('kind = "webhook"\nurl = "ftp://x"\n', "kind = 'webhook' needs url = 'http(s)://...'"),
    ],
)
def test_a_table_that_cannot_serve_its_kind_is_one_error(tmp_path, body, said):
    with pytest.raises(ConfigError) as err:
        _table(tmp_path, body)
    assert said in str(err.value)
