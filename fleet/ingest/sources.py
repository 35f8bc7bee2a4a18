"""Telemetry sources by name: each a `Plugin` (its name, the settings model of its own table `[ingest.sources.NAME]`,
and how it is built into a `TelemetrySource`). A source is on when its table is given. A new source is its module
(its settings model and its source: a run's pull into the store and its `fleet serve --check` line, beside the drop
folder's in `fleet.ingest.drop` and Prometheus' in `fleet.ingest.prometheus_source`) and one registration here; the
service's config, its ingest job, the check and `fleet ingest` read this registry."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails

from fleet.core.errors import ConfigError
from fleet.core.old_keys import tell
from fleet.core.registry import Plugin, Registry
from fleet.ingest.drop import DropFolder, DropFolderSettings
from fleet.ingest.prometheus_source import PrometheusSettings, PrometheusSource
from fleet.ingest.source_run import IngestRun


class TelemetrySource(Protocol):
    check_name: str  # what its `fleet serve --check` line is called

    def pull(self, run: IngestRun) -> int:
        """One run of the service's ingest job: its records into the store; the records read."""

    def check(self, timeout_s: float) -> tuple[bool, str]:
        """`fleet serve --check`: (passed, what it says), within `timeout_s`."""


TELEMETRY_SOURCES: Registry[TelemetrySource] = Registry("telemetry source")
TELEMETRY_SOURCES.register(Plugin("drop-folder", DropFolderSettings, DropFolder))
TELEMETRY_SOURCES.register(Plugin("prometheus", PrometheusSettings, PrometheusSource))


def source_settings(tables: dict[str, Any]) -> dict[str, BaseModel]:
    """Each source's settings from its table in `[ingest.sources]`, by its name. Raises one `ValidationError` with
    every bad key at its place (`sources.NAME.key`), and a table no source owns as an unknown source."""
    out: dict[str, BaseModel] = {}
    errors: list[InitErrorDetails] = []
    for name, table in tables.items():
        if name not in TELEMETRY_SOURCES:
            known = ", ".join(TELEMETRY_SOURCES.names())
            errors.append(InitErrorDetails(type="value_error", loc=("sources", name), input=table,
                                           ctx={"error": ValueError(f"unknown telemetry source (known: {known})")}))
            continue
        try:
            out[name] = TELEMETRY_SOURCES.get(name).settings.model_validate(table)
        except ValidationError as err:
            errors += [InitErrorDetails(type=e["type"], loc=("sources", name, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
                       for e in err.errors()]
    if errors:
        raise ValidationError.from_exception_data("ingest", errors)
    return out


def built_sources(settings: dict[str, BaseModel]) -> list[TelemetrySource]:
    """The sources whose tables are given, each built from its settings, in the order of their names."""
    return [TELEMETRY_SOURCES.get(name).build(settings[name]) for name in sorted(settings)]


def source_checks(sources: list[TelemetrySource], timeout_s: float) -> list[tuple[str, bool, str]]:
    """`fleet serve --check`'s line of each source: (its name, passed, what it says)."""
    return [(source.check_name, *source.check(timeout_s)) for source in sources]


def source_for(values: dict[str, Any], where: str) -> TelemetrySource:
    """The one source whose settings hold every key given (`fleet ingest`'s options, as its table would give them),
    built from them: the command asks the registry, never names a source."""
    owners = [plugin.name for plugin in TELEMETRY_SOURCES if set(values) <= set(plugin.settings.model_fields)]
    if len(owners) != 1:
        raise ConfigError(f"{where}: {'no' if not owners else 'more than one'} telemetry source takes {', '.join(sorted(values))}")
    return TELEMETRY_SOURCES.build(owners[0], values, where)


def moved_to_sources(table: Any, fields: set[str]) -> Any:
    """A raw `[ingest]` table with the sources' keys written flat in it, the old way, moved to their tables
    `[ingest.sources.NAME]` (a key to each source that holds it), told once per source; any other key is left for
    the table to refuse."""
    if not isinstance(table, dict) or set(table) <= fields:
        return table
    out = dict(table)
    given = out.get("sources", {})
    if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
        return table  # a `sources` that is not a table of tables: the table's own validation names it
    sources = {name: dict(values) for name, values in given.items()}
    for plugin in TELEMETRY_SOURCES:
        keys = sorted(k for k in table if k not in fields and k in plugin.settings.model_fields)
        if keys:
            sources[plugin.name] = {**sources.get(plugin.name, {}), **{k: table[k] for k in keys}}
            tell("ingest", keys, f"[ingest.sources.{plugin.name}]")
    for key in {k for plugin in TELEMETRY_SOURCES for k in plugin.settings.model_fields} - fields:
        out.pop(key, None)
    out["sources"] = sources
    return out


__all__ = ["TELEMETRY_SOURCES", "IngestRun", "TelemetrySource", "built_sources", "moved_to_sources", "source_checks",
           "source_for", "source_settings"]
