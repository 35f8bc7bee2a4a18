"""Actuators by name: each a `Plugin` (its name, the settings model of its own table `[actuator.NAME]`, and how it
is built), chosen by `[actuator] kind`. A new actuator is its module (its settings model and its class: `act`,
`close`, `check`, as `dry_run.py`, `command.py` and `webhook.py` give theirs) and one registration here; the config,
the service and `fleet serve --check` read this registry."""

from __future__ import annotations

from typing import Any

from fleet.core.registry import NoSettings, Plugin, Registry
from fleet.service.actuators.base import Actuator, decision_payload
from fleet.service.actuators.command import Command, CommandSettings
from fleet.service.actuators.dry_run import DryRun
from fleet.service.actuators.webhook import Webhook, WebhookSettings

ACTUATORS: Registry[Actuator] = Registry("actuator")
ACTUATORS.register(Plugin("dry-run", NoSettings, lambda settings: DryRun()))
ACTUATORS.register(Plugin("command", CommandSettings, Command.of))
ACTUATORS.register(Plugin("webhook", WebhookSettings, Webhook.of))


def make_actuator(kind: str, settings: Any) -> Actuator:
    """The actuator `kind`, built from its validated settings (`ActuatorSettings.own`)."""
    return ACTUATORS.get(kind).build(settings)


__all__ = ["ACTUATORS", "Actuator", "Command", "CommandSettings", "DryRun", "Webhook", "WebhookSettings",
           "decision_payload", "make_actuator"]
