"""Telemetry sources by name: the keys of `[ingest]` each one owns, whether they turn it on, how it pulls one run's
records into the store, and what `fleet serve --check` says of it. A new source is its module (its settings model,
its pull and its check, beside the drop folder's in `fleet.ingest.drop` and Prometheus' in
`fleet.ingest.prometheus_source`) and one registration here; the service's config, its ingest job and the check
read this registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails

from fleet.core.registry import Registry
from fleet.ingest.drop import DropFolderSettings, check_drop_folder, pull_drop_folder
from fleet.ingest.prometheus_source import PrometheusSettings, check_prometheus, pull_since_rollup
from fleet.ingest.source_run import IngestRun


@dataclass(frozen=True)
class TelemetrySource:
    """A source as registered: the settings model of the keys of `[ingest]` it owns (validated with the config),
    whether its settings turn it on, one run's pull into the store (the records read), and its `--check` line:
    the check's name, and (passed, what it says) within a time bound."""

    settings: type[BaseModel]
    on: Callable[[Any], bool]
    pull: Callable[[Any, IngestRun], int]
    check_name: str
    check: Callable[[Any, float], tuple[bool, str]]


TELEMETRY_SOURCES: Registry[TelemetrySource] = Registry("telemetry source")
TELEMETRY_SOURCES.register("drop-folder", TelemetrySource(
    DropFolderSettings, on=lambda own: bool(own.folder), pull=pull_drop_folder, check_name="drop folder", check=check_drop_folder,
))
TELEMETRY_SOURCES.register("prometheus", TelemetrySource(
    PrometheusSettings, on=lambda own: bool(own.prometheus_url), pull=pull_since_rollup, check_name="prometheus",
    check=check_prometheus,
))


def source_settings(values: dict[str, Any]) -> dict[str, BaseModel]:
    """Each registered source's settings from the keys of `[ingest]` it owns (two sources may own one key). Raises
    one `ValidationError` with every bad key at its place, and a key no source owns as unknown."""
    out: dict[str, BaseModel] = {}
    errors: dict[tuple, InitErrorDetails] = {}
    owned: set[str] = set()
    for name in TELEMETRY_SOURCES.names():
        model = TELEMETRY_SOURCES.get(name).settings
        own = {k: v for k, v in values.items() if k in model.model_fields}
        owned.update(own)
        try:
            out[name] = model.model_validate(own)
        except ValidationError as err:
            for e in err.errors():
                errors.setdefault((e["loc"], e["msg"]), InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"],
                                                                         ctx=e.get("ctx", {})))
    for key in values:
        if key not in owned:
            errors.setdefault(((key,), "unknown"), InitErrorDetails(type="extra_forbidden", loc=(key,), input=values[key]))
    if errors:
        raise ValidationError.from_exception_data("ingest", list(errors.values()))
    return out


def sources_on(settings: dict[str, BaseModel]) -> list[tuple[TelemetrySource, BaseModel]]:
    """The sources the settings turn on, each with its own settings, in the registry's order of names."""
    return [(TELEMETRY_SOURCES.get(name), own) for name, own in settings.items()
            if name in TELEMETRY_SOURCES and TELEMETRY_SOURCES.get(name).on(own)]


def source_checks(settings: dict[str, BaseModel], timeout_s: float) -> list[tuple[str, bool, str]]:
    """`fleet serve --check`'s line of each source turned on: (its name, passed, what it says)."""
    return [(source.check_name, *source.check(own, timeout_s)) for source, own in sources_on(settings)]


__all__ = ["TELEMETRY_SOURCES", "IngestRun", "TelemetrySource", "source_checks", "source_settings", "sources_on"]
