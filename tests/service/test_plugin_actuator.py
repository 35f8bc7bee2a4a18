"""A new actuator is its module, its registration and its test, and nothing else.

The actuator here is written the way `fleet.service.actuators`' are (`dry_run.py`, `command.py`, `webhook.py`): a
settings model of its own table, `[actuator.ledger]` (`path`, `prefix`), and a class that carries a decision out,
stops on `close()` and gives `fleet serve --check` its line. Registered, it is chosen by `[actuator] kind`, built
from its table when the config is read, and the service carries every decision out through it, with no change
anywhere else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from fleet.core.errors import ConfigError
from fleet.core.registry import Plugin
from fleet.core.scenario import Strict
from fleet.presets import load_preset
from fleet.service.acting import ACTIONS
from fleet.service.actuators import ACTUATORS, make_actuator
from fleet.service.config import load_service_config
from storage.values import JournalRow
from tests.service.serving import TINY_PRESET


# -- the actuator's module --------------------------------------------------------------------------------------


class LedgerSettings(Strict):
    """A file each decision is written to as one line (an operator's ledger, read by whoever provisions)."""

    path: str = Field(min_length=1)
    prefix: str = "fleet"


class Ledger:
    name = "ledger"

    def __init__(self, settings: LedgerSettings):
        self.path, self.prefix = Path(settings.path), settings.prefix
        self.closed = False

    def act(self, row: JournalRow, epoch: int | None = None) -> None:
        with self.path.open("a") as f:
            f.write(f"{self.prefix} {row.key} {row.kind} {row.card_key} epoch={epoch}\n")

    def close(self) -> None:
        self.closed = True

    def check(self) -> tuple[bool, str]:
        folder = self.path.parent
        return folder.is_dir(), f"ledger {self.path}: {'its folder is there' if folder.is_dir() else 'no such folder'}"


# -- its registration -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def registered():
    if "ledger" not in ACTUATORS:
        ACTUATORS.register(Plugin("ledger", LedgerSettings, Ledger))


# -- its test ---------------------------------------------------------------------------------------------------


def config(tmp_path, table: str):
    (tmp_path / "fleet.toml").write_text('[actuator]\nkind = "ledger"\n\n[actuator.ledger]\n' + table)
    return load_service_config(tmp_path / "fleet.toml")


def test_the_service_carries_every_decision_out_through_the_new_actuator(tmp_path):
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config
    from storage import open_repository

    ledger = tmp_path / "ledger.txt"
    cfg = config(tmp_path, f'path = "{ledger}"\nprefix = "pool-7"\n')
    assert cfg.actuator.own == LedgerSettings(path=str(ledger), prefix="pool-7")  # read from its own table
    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    scenario = load_preset(str(tmp_path / "tiny.toml")).scenario
    cfg = simulation_config(cfg, scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), SimClock(cfg.month.start_ts, 1e9), simulation=sim)
    assert isinstance(svc.journal.actuator, Ledger)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    actions = svc.journal_store.decisions(kinds=sorted(ACTIONS))
    assert actions and all(row.acted_ts is not None for row in actions)
    assert ledger.read_text().splitlines() == [f"pool-7 {row.key} {row.kind} {row.card_key} epoch=None" for row in actions]
    svc.shutdown()
    assert svc.journal.actuator.closed  # the service closes it on its way out


def test_the_new_actuator_validates_its_table_and_has_its_check_line(tmp_path):
    with pytest.raises(ConfigError, match=r"actuator\.ledger\.path: Field required"):
        config(tmp_path, 'prefix = "x"\n')
    with pytest.raises(ConfigError, match=r"actuator\.ledger\.colour: unknown key"):
        config(tmp_path, f'path = "{tmp_path / "l.txt"}"\ncolour = "red"\n')
    cfg = config(tmp_path, f'path = "{tmp_path / "l.txt"}"\n')
    assert make_actuator(cfg.actuator.kind, cfg.actuator.own).check() == (True, f"ledger {tmp_path / 'l.txt'}: its folder is there")
    cfg = config(tmp_path, f'path = "{tmp_path / "gone" / "l.txt"}"\n')
    assert make_actuator(cfg.actuator.kind, cfg.actuator.own).check()[0] is False


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="actuator 'ledger' registered twice"):
        ACTUATORS.register(ACTUATORS.get("ledger"))
