"""Plug-ins by name, in one shape: a name, the settings model it owns, and how it is built from its settings.

Every kind of plug-in (sizing modes, windows, scores, forecasters, eviction rules, admissions, hysteresis,
telemetry and demand sources, actuators) is a `Plugin` in a `Registry` of its kind. A registry refuses a name given
twice, names the known ones on a miss, and builds a plug-in from the table its settings are written in, so a bad
setting is one `ConfigError` naming where it is written. A plug-in with nothing to set owns `NoSettings`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from fleet.core.errors import ConfigError, format_validation
from fleet.core.scenario import Strict

T = TypeVar("T")


class NoSettings(Strict):
    """The settings of a plug-in with nothing to set: any key given is unknown."""


@dataclass(frozen=True)
class Plugin(Generic[T]):
    """A plug-in as registered: its name, the settings model it owns, and how it is built from those settings."""

    name: str
    settings: type[BaseModel]
    build: Callable[[Any], T]


def constant(value: T) -> Callable[[Any], T]:
    """The `build` of a plug-in with nothing to set: the same value whatever its (empty) settings."""
    return lambda settings: value


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, Plugin[T]] = {}

    def register(self, plugin: Plugin[T]) -> Plugin[T]:
        if plugin.name in self._items:
            raise ValueError(f"{self.kind} {plugin.name!r} registered twice")
        self._items[plugin.name] = plugin
        return plugin

    def get(self, name: str) -> Plugin[T]:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None

    def settings(self, name: str, values: Mapping[str, Any] | None, where: str) -> BaseModel:
        """The plug-in's own settings from the table `where` (`policy.scores.dip-aware`); a bad or unknown key is one
        `ConfigError` naming `where` and the key."""
        plugin = self.get(name)
        try:
            return plugin.settings.model_validate(dict(values or {}))
        except ValidationError as err:
            raise ConfigError(f"{where}: {format_validation(err)}") from None

    def build(self, name: str, values: Mapping[str, Any] | None, where: str) -> T:
        """The plug-in `name` built from its settings, as written in the table `where`."""
        return self.get(name).build(self.settings(name, values, where))

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[Plugin[T]]:
        """The plug-ins in the order of their names."""
        return iter(self._items[n] for n in self.names())
