"""Prometheus as a telemetry source: a range query's series as records, one card per series."""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

import numpy as np
import pyarrow as pa

from fleet.core.errors import ConfigError
from fleet.ingest.fields import _json_field
from fleet.ingest.formats import BadSource, Parsed
from fleet.ingest.store import IngestReport, IngestSettings, ingest_parsed
from storage.interfaces import TelemetryStore

DEFAULT_CARD_LABEL = "instance"


def parse_prometheus(body: bytes, name: str, card_label: str = "instance") -> Parsed:
    """Parse a Prometheus `query_range` answer (a matrix): one record per (series, point), the card from `card_label`."""
    digest = hashlib.sha256(body).hexdigest()
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadSource(f"{name}: the answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise BadSource(f"{name}: Prometheus answered {'an error: ' + str(err) if err else 'without success'}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise BadSource(f"{name}: expected a range query's matrix, got {kind or 'something else'}")
    card, ts, tps, raw = [], [], [], []
    bad_no: list[int] = []
    bad_reason: list[str] = []
    good_no: list[int] = []
    no = 0
    for series in data["result"]:
        metric = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list):
            no += 1
            bad_no.append(no)
            bad_reason.append("not-an-object")
            raw.append(json.dumps(series)[:4096])
            continue
        key = metric.get(card_label)
        for point in points:
            no += 1
            raw.append(json.dumps({"metric": metric, "value": point}))
            if not (isinstance(point, list) and len(point) == 2):
                bad_no.append(no)
                bad_reason.append("not-an-object")
                continue
            good_no.append(no)
            card.append(_json_field(key))
            ts.append(_json_field(point[0]))
            tps.append(_json_field(point[1]))
    columns = {"card_id": pa.array(card, pa.string()), "ts": pa.array(ts, pa.string()), "tokens_per_s": pa.array(tps, pa.string())}

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [raw[int(r) - 1] for r in record_nos]

    return Parsed.of_columns(name, digest, columns, np.array(good_no, dtype=np.int64), np.array(bad_no, dtype=np.int64), bad_reason, raw_text)


# -- judging ----------------------------------------------------------------------


DEFAULT_PROMETHEUS_QUERY = "sum by (instance) (rate(vllm:generation_tokens_total[1m]))"


def fetch_prometheus(base_url: str, query: str, start_ts: float, end_ts: float, step_s: float, timeout_s: float = 30.0) -> tuple[bytes, str]:
    """GET `/api/v1/query_range` from a Prometheus server; returns the answer's bytes and a name for the source."""
    import urllib.error
    import urllib.parse
    import urllib.request

    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"Prometheus URL {base_url!r}: expected http:// or https://")
    if not end_ts > start_ts or not step_s > 0:
        raise ConfigError(f"Prometheus range: need start < end and step > 0 (got start={start_ts}, end={end_ts}, step={step_s})")
    params = urllib.parse.urlencode({"query": query, "start": f"{start_ts:.3f}", "end": f"{end_ts:.3f}", "step": f"{step_s:g}"})
    url = base_url.rstrip("/") + "/api/v1/query_range?" + params
    name = f"prometheus {base_url.rstrip('/')} {query!r} [{int(start_ts)}, {int(end_ts)}] step {step_s:g}s"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.read(), name
    except urllib.error.HTTPError as err:
        body = err.read()
        try:
            detail = json.loads(body).get("error") or err.reason
        except (ValueError, AttributeError):
            detail = err.reason
        raise BadSource(f"{name}: HTTP {err.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise BadSource(f"{name}: cannot reach the server ({getattr(err, 'reason', err)})") from None


def ingest_prometheus(repo: TelemetryStore, base_url: str, query: str, start_ts: float, end_ts: float, step_s: float,
                      settings: IngestSettings, card_label: str = "instance") -> IngestReport:
    """Pull a range query and store it like a file: one record per series point, the card named by `card_label`."""
    body, name = fetch_prometheus(base_url, query, start_ts, end_ts, step_s)
    return ingest_parsed(repo, parse_prometheus(body, name, card_label), settings)
