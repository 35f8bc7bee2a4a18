"""Actuators by name: how `[actuator] kind = "..."` is built, what its table must give, and what `fleet serve
--check` says of it. A new actuator is its class (beside `DryRun`, `Command` and `Webhook` in
`fleet.service.journal`) and one registration here; the config, the service and the check read this registry."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any, Callable

from fleet.core.errors import hide_passwords
from fleet.core.registry import Registry
from fleet.service.journal import Actuator, Command, DryRun, Webhook


@dataclass(frozen=True)
class ActuatorKind:
    """An actuator as registered: built from the `[actuator]` table, the reason the table cannot serve it (None when
    it can), and the `--check` line (passed, what it says)."""

    build: Callable[[Any], Actuator]
    needs: Callable[[Any], str | None] = lambda table: None
    check: Callable[[Any], tuple[bool, str]] = lambda table: (True, table.kind)


def _command_check(table) -> tuple[bool, str]:
    prog = table.command[0]
    found = shutil.which(prog)
    return found is not None, f"command {prog!r}: {found or 'not found on PATH'}"


ACTUATORS: Registry[ActuatorKind] = Registry("actuator")
ACTUATORS.register("dry-run", ActuatorKind(lambda table: DryRun()))
ACTUATORS.register("command", ActuatorKind(
    lambda table: Command(table.command, table.timeout_s, pass_env=table.pass_env, env=dict(table.env), retries=table.retries),
    needs=lambda table: None if table.command else "kind = 'command' needs command = [program, args...]",
    check=_command_check,
))
ACTUATORS.register("webhook", ActuatorKind(
    lambda table: Webhook(table.url or "", table.timeout_s, table.auth),
    needs=lambda table: (None if table.url and table.url.startswith(("http://", "https://"))
                         else "kind = 'webhook' needs url = 'http(s)://...'"),
    check=lambda table: (True, f"webhook to {hide_passwords(table.url or '')}"),
))


def make_actuator(table) -> Actuator:
    """The actuator `[actuator]` names, built from its table."""
    return ACTUATORS.get(table.kind).build(table)
