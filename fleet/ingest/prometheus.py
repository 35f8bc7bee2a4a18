"""Prometheus as a telemetry source: a range query's series as records, one card per series, with its busy fraction.

Two range queries over the same start, end and step: the rate (tokens/s) and,
when given, the busy fraction (the share of each step the card was serving).
Their points are joined on (card, ts): a rate point whose busy point is missing
is stored without a busy fraction, a busy point without a rate is dropped. The
card is named by one label, or several joined with "/" (a DCGM exporter's
`Hostname` and `gpu`); a series lacking one of them is quarantined as
`missing:card_id`.

The pull sends the configured credentials in `Authorization` and never follows
a redirect (a 3xx is an error naming its `Location`), so a token never goes to a
host it was not meant for. The secret is never in a name, error or log line.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pyarrow as pa

from fleet.core.errors import ConfigError, hide_passwords
from fleet.credentials import http_opener
from fleet.ingest.fields import _json_field
from fleet.ingest.formats import BadSource, Parsed
from fleet.ingest.prometheus_serving import ServingAsk, ServingPoints, fetch_serving
from storage.values import SERVING_COLUMNS

if TYPE_CHECKING:
    from fleet.credentials import Credentials

DEFAULT_CARD_LABEL = "instance"
CARD_LABEL_JOIN = "/"
DEFAULT_TIMEOUT_S = 30.0


def card_labels(card_label: str | Sequence[str]) -> tuple[str, ...]:
    """The labels naming a card, as a tuple (one label may be given as a string)."""
    labels = (card_label,) if isinstance(card_label, str) else tuple(card_label)
    if not labels or not all(isinstance(x, str) and x.strip() for x in labels):
        raise ConfigError(f"card label {card_label!r}: give a label name or a list of label names")
    return labels


def rate_query(card_label: str | Sequence[str] = DEFAULT_CARD_LABEL, window: str = "1m") -> str:
    """vLLM's generation rate (tokens/s) per card over `window`."""
    return f"sum by ({', '.join(card_labels(card_label))}) (rate(vllm:generation_tokens_total[{window}]))"


def busy_query(card_label: str | Sequence[str] = DEFAULT_CARD_LABEL, window: str = "1m", resolution: str = "5s") -> str:
    """The share of `window` a card had a request running (vLLM's `num_requests_running` above zero), looked at
    every `resolution` (finer than the scrape interval, so each scraped value counts for the time it held)."""
    by = ", ".join(card_labels(card_label))
    return f"avg_over_time((sum by ({by}) (vllm:num_requests_running) > bool 0)[{window}:{resolution}])"


DEFAULT_PROMETHEUS_QUERY = rate_query()
DEFAULT_BUSY_QUERY = busy_query()


def _matrix(body: bytes, name: str) -> list:
    """The series of a `query_range` answer, or `BadSource` saying why it is not one."""
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
    return data["result"]


def _card(metric: dict, labels: tuple[str, ...]) -> str | None:
    values = [metric.get(label) for label in labels]
    if not all(isinstance(v, str) and v for v in values):
        return None
    return CARD_LABEL_JOIN.join(values)


def _busy_points(body: bytes, name: str, labels: tuple[str, ...]) -> dict[tuple[str, float], object]:
    """(card, ts) -> the busy answer's value; a key two series give different values is left out (no busy known)."""
    out: dict[tuple[str, float], object] = {}
    conflicts = set()
    for series in _matrix(body, name):
        metric = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list) or (card := _card(metric, labels)) is None:
            continue
        for point in points:
            if isinstance(point, list) and len(point) == 2 and isinstance(point[0], (int, float)) and not isinstance(point[0], bool):
                key = (card, float(point[0]))
                if key in out and out[key] != point[1]:
                    conflicts.add(key)
                out[key] = point[1]
    for key in conflicts:
        del out[key]
    return out


def parse_prometheus(body: bytes, name: str, card_label: str | Sequence[str] = DEFAULT_CARD_LABEL,
                     busy_body: bytes | None = None, busy_name: str | None = None, serving: ServingPoints | None = None) -> Parsed:
    """Parse a Prometheus `query_range` answer (a matrix): one record per (series, point), the card from `card_label`,
    the busy fraction from the busy query's answer `busy_body` at the same (card, ts) when given, and the serving
    columns from `serving` (`fleet.ingest.prometheus_serving`) when given."""
    labels = card_labels(card_label)
    digest = hashlib.sha256(body + b"\0" + (busy_body or b"") + (serving.digest.encode() if serving else b"")).hexdigest()
    result = _matrix(body, name)
    busy = _busy_points(busy_body, busy_name or f"{name} (busy)", labels) if busy_body is not None else None
    card, ts, tps, busy_col, raw = [], [], [], [], []
    served: dict[str, list[str]] = {c: [] for c in SERVING_COLUMNS}
    bad_no: list[int] = []
    bad_reason: list[str] = []
    good_no: list[int] = []
    no = 0
    for series in result:
        metric = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list):
            no += 1
            bad_no.append(no)
            bad_reason.append("not-an-object")
            raw.append(json.dumps(series)[:4096])
            continue
        key = _card(metric, labels)
        for point in points:
            no += 1
            if not (isinstance(point, list) and len(point) == 2):
                raw.append(json.dumps({"metric": metric, "value": point}))
                bad_no.append(no)
                bad_reason.append("not-an-object")
                continue
            b = None
            if busy is not None and key is not None and isinstance(point[0], (int, float)) and not isinstance(point[0], bool):
                b = busy.get((key, float(point[0])))
            extra, why = ({}, None)
            if serving is not None and key is not None and isinstance(point[0], (int, float)) and not isinstance(point[0], bool):
                extra, why = serving.row((key, float(point[0])))
            raw.append(json.dumps({"metric": metric, "value": point, "busy_fraction": b, **extra}))
            if why is not None:
                bad_no.append(no)
                bad_reason.append(why)
                continue
            for c in SERVING_COLUMNS if serving is not None else ():
                served[c].append(_json_field(extra.get(c)))
            good_no.append(no)
            card.append(_json_field(key))
            ts.append(_json_field(point[0]))
            tps.append(_json_field(point[1]))
            busy_col.append(_json_field(b))
    columns = {"card_id": pa.array(card, pa.string()), "ts": pa.array(ts, pa.string()), "tokens_per_s": pa.array(tps, pa.string())}
    if busy is not None:
        columns["busy_fraction"] = pa.array(busy_col, pa.string())
    if serving is not None:
        columns.update({c: pa.array(v, pa.string()) for c, v in served.items()})

    def raw_text(record_nos: Iterable[int]) -> list[str]:
        return [raw[int(r) - 1] for r in record_nos]

    return Parsed.of_columns(name, digest, columns, np.array(good_no, dtype=np.int64), np.array(bad_no, dtype=np.int64), bad_reason, raw_text)


# -- fetching ---------------------------------------------------------------------


def _shown(base_url: str) -> str:
    """The base URL as names and errors show it, its secret masked."""
    return hide_passwords(base_url.rstrip("/"))


def fetch_prometheus(base_url: str, query: str, start_ts: float, end_ts: float, step_s: float, timeout_s: float = DEFAULT_TIMEOUT_S,
                     auth: Credentials | None = None) -> tuple[bytes, str]:
    """GET `/api/v1/query_range` from a Prometheus server; returns the answer's bytes and a name for the source.

    `auth`'s `Authorization` header is read at the call (a rotated token file is picked up); a redirect is
    refused rather than followed, so the header never reaches another URL."""
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"Prometheus URL {_shown(base_url)!r}: expected http:// or https://")
    if not end_ts > start_ts or not step_s > 0:
        raise ConfigError(f"Prometheus range: need start < end and step > 0 (got start={start_ts}, end={end_ts}, step={step_s})")
    params = urllib.parse.urlencode({"query": query, "start": f"{start_ts:.3f}", "end": f"{end_ts:.3f}", "step": f"{step_s:g}"})
    url = base_url.rstrip("/") + "/api/v1/query_range?" + params
    name = f"prometheus {_shown(base_url)} {query!r} [{int(start_ts)}, {int(end_ts)}] step {step_s:g}s"
    headers = auth.headers() if auth is not None else {}
    opener = http_opener()
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
            return resp.read(), name
    except urllib.error.HTTPError as err:
        if 300 <= err.code < 400:
            where = err.headers.get("Location") if err.headers else None
            raise BadSource(f"{name}: HTTP {err.code}: a redirect (to {where or 'nowhere given'}) is not followed; "
                            "give the server's final URL") from None
        body = err.read()
        try:
            detail = json.loads(body).get("error") or err.reason
        except (ValueError, AttributeError):
            detail = err.reason
        raise BadSource(f"{name}: HTTP {err.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise BadSource(f"{name}: cannot reach the server ({getattr(err, 'reason', err)})") from None


def pull_prometheus(base_url: str, query: str, start_ts: float, end_ts: float, step_s: float,
                    card_label: str | Sequence[str] = DEFAULT_CARD_LABEL, busy_query: str | None = None,
                    auth: Credentials | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                    serving: ServingAsk | None = None) -> Parsed:
    """The rate query's records over [start_ts, end_ts], each with the busy query's value at its (card, ts) when a
    busy query is given (an empty one is none), and the serving columns when `serving` asks for them
    (`fleet.ingest.prometheus_serving.serving_ask`)."""
    body, name = fetch_prometheus(base_url, query, start_ts, end_ts, step_s, timeout_s, auth)
    busy_body = busy_name = None
    if busy_query:
        busy_body, busy_name = fetch_prometheus(base_url, busy_query, start_ts, end_ts, step_s, timeout_s, auth)
    points = None
    if serving:
        labels = card_labels(card_label)
        points = fetch_serving(lambda q: fetch_prometheus(base_url, q, start_ts, end_ts, step_s, timeout_s, auth), serving,
                               labels, _busy_points, _matrix, _card)
    return parse_prometheus(body, name, card_label, busy_body, busy_name, points)

