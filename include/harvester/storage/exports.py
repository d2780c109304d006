"""Exports of a source's records: JSON Lines, CSV or Parquet, streamed from a cursor.

Records are read in ``_id`` order through one cursor and written as they come, so memory does not grow
with the output (Parquet: one row group per ``ROW_GROUP`` records). Every format keeps the types:

- ``jsonl``: MongoDB Extended JSON (relaxed), one record a line: datetimes as ``{"$date": ...}``, exact
  prices as ``{"$numberDecimal": "1299.00"}``; :func:`read_jsonl` (``bson.json_util``) reads them back.
- ``csv``: one column per field (``url``, the attributes in YAML order, then Harvester's); datetimes in
  ISO 8601 with their offset, decimals as written, lists and prices as JSON; empty is null. A text cell that
  a spreadsheet would run as a formula (it begins with ``=``, ``+``, ``-``, ``@``, a TAB or a CR: OWASP's
  CSV injection rule) is written with a ``'`` before it, as is a text that already begins with ``'``, so the
  escape can be undone exactly; ``escape_formulas=False`` writes them raw. :func:`read_csv` reads them back
  with the source's attribute types, the escape undone.
- ``parquet`` (pyarrow): a schema made from the attribute types (int64, float64, bool, UTC timestamps,
  ``decimal128(38, 18)`` amounts in a struct with their currency, lists of those); a row group is written
  every ``ROW_GROUP`` records or ``ROW_GROUP_BYTES`` of values, whichever comes first, so large records do
  not pile up in memory.

Harvester's own bookkeeping (``_id``, ``_http``) is never exported.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from bson import json_util
from bson.decimal128 import Decimal128
from pymongo.collection import Collection

from harvester.config import SourceConfig, scalar_type
from harvester.errors import ExportUnavailable
from harvester.storage.lifecycle import gone_filter
from harvester.storage.records import plain
from harvester.storage.runs import RunStore

__all__ = ["FORMATS", "MEDIA_TYPES", "ExportQuery", "export_query", "export_records", "field_types", "read_csv",
           "read_jsonl", "read_parquet"]

Format = Literal["jsonl", "csv", "parquet"]
FORMATS: tuple[Format, ...] = ("jsonl", "csv", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8",
               "parquet": "application/vnd.apache.parquet"}
METADATA = {"first_seen_at": "datetime", "harvested_at": "datetime", "changed_at": "datetime", "run_id": "str",
            "gone_at": "datetime", "gone_reason": "str", "config_version": "str"}
HIDDEN = {"_id": 0, "_http": 0}
ROW_GROUP = 10_000
ROW_GROUP_BYTES = 64 * 1024 * 1024  # about this much of values per row group, whatever the records' size
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP: what makes a spreadsheet read a cell as a formula
FORMULA_ESCAPE = "'"
JSON_OPTIONS = json_util.JSONOptions(json_mode=json_util.JSONMode.RELAXED, tz_aware=True, tzinfo=UTC)
Progress = Callable[[int], None]


def field_types(source: SourceConfig) -> dict[str, str]:
    """Every exported field and its type: ``url``, the detail and listing-record attributes, then metadata."""
    attributes = dict(source.attributes)
    if source.listing is not None and source.listing.records is not None:
        attributes.update(source.listing.records.attributes)
    types = {"url": "url"}
    types.update({name: attribute.type for name, attribute in attributes.items()})
    types.update(METADATA)
    return types


class ExportQuery:
    """Which records: a run's (``run_id``), harvested since ``since``, and only those whose values changed
    (``changed_only``: ``changed_at`` within the run, or since ``since``; alone: the latest run's changes)."""

    def __init__(self, run_id: str | None = None, since: datetime | None = None, changed_only: bool = False,
                 run_started_at: datetime | None = None, gone: bool | None = None) -> None:
        self.run_id, self.since, self.changed_only, self.run_started_at = run_id, since, changed_only, run_started_at
        self.gone = gone  # True: only records of gone items (``gone_at``); False: only live ones; None: all

    def filter(self) -> dict[str, Any]:
        query: dict[str, Any] = gone_filter(self.gone)
        if self.run_id is not None:
            query["run_id"] = self.run_id
        if self.since is not None:
            query["harvested_at"] = {"$gte": self.since}
        if self.changed_only:
            moment = self.run_started_at or self.since
            query["changed_at"] = {"$gte": moment} if moment is not None else {"$exists": True}
        return query


def export_query(runs_database: Any, source: SourceConfig, run_id: str | None = None, since: datetime | None = None,
                 changed_only: bool = False, gone: bool | None = None) -> ExportQuery:
    """The query of ``harvester export`` and the results download: ``changed_only`` needs when the run (the
    given one, else the source's latest) started, read from the runs collection."""
    started = None
    if changed_only and since is None:
        runs = RunStore(runs_database).collection
        run = (runs.find_one({"source": source.name, "run_id": run_id}) if run_id is not None else
               runs.find_one({"source": source.name}, sort=[("started_at", -1)]))
        started = (run or {}).get("started_at")
        if started is not None and started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
    return ExportQuery(run_id, since, changed_only, started, gone)


def escape_formula(text: str) -> str:
    """``text`` with a ``'`` before it when a spreadsheet would run it as a formula (or it begins with ``'``,
    so :func:`unescape_formula` can tell an escape from a value)."""
    return FORMULA_ESCAPE + text if text.startswith((*FORMULA_STARTS, FORMULA_ESCAPE)) else text


def unescape_formula(cell: str) -> str:
    return cell[1:] if cell.startswith(FORMULA_ESCAPE) else cell


def _csv_cell(value: Any, escape_formulas: bool) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(plain(value), ensure_ascii=False)
    value = plain(value)
    if not isinstance(value, str):
        return repr(value)  # a number: a spreadsheet reads -5 as minus five, never as a formula
    return escape_formula(value) if escape_formulas else value


def _records(collection: Collection, query: ExportQuery) -> Iterator[dict[str, Any]]:
    collection = collection.with_options(codec_options=collection.codec_options.with_options(tz_aware=True,
                                                                                              tzinfo=UTC))
    with collection.find(query.filter(), HIDDEN, batch_size=2000).sort("_id", 1) as cursor:
        yield from cursor


def export_records(source: SourceConfig, collection: Collection, fmt: str, out: IO[bytes],
                   query: ExportQuery | None = None, progress: Progress | None = None, *,
                   escape_formulas: bool = True) -> int:
    """Write the selected records to ``out`` in ``fmt`` (one of :data:`FORMATS`); how many were written.
    ``escape_formulas`` (CSV only): text cells a spreadsheet would run as formulas get a ``'`` first."""
    if fmt not in FORMATS:  # the command and the download check first; a caller that did not learns it here
        raise ValueError(f"no export format {fmt!r}: one of {', '.join(FORMATS)}")
    records = _records(collection, query or ExportQuery())
    progress = progress or (lambda count: None)
    if fmt == "csv":
        return _write_csv(source, records, out, progress, escape_formulas)
    return (_write_jsonl if fmt == "jsonl" else _write_parquet)(source, records, out, progress)


def _write_jsonl(source: SourceConfig, records: Iterable[dict[str, Any]], out: IO[bytes], progress: Progress) -> int:
    count = 0
    for record in records:
        out.write(json_util.dumps(record, json_options=JSON_OPTIONS, ensure_ascii=False).encode() + b"\n")
        count += 1
        progress(count)
    return count


def _write_csv(source: SourceConfig, records: Iterable[dict[str, Any]], out: IO[bytes], progress: Progress,
               escape_formulas: bool = True) -> int:
    columns = list(field_types(source))
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv.writer(text)
    writer.writerow(columns)
    count = 0
    for record in records:
        writer.writerow([_csv_cell(record.get(column), escape_formulas) for column in columns])
        count += 1
        progress(count)
    text.flush()
    text.detach()  # ``out`` stays open: it is the caller's
    return count


# -- Parquet --------------------------------------------------------------------------------------
def _arrow_type(attribute_type: str) -> Any:
    import pyarrow as pa

    scalar = scalar_type(attribute_type)
    base = {
        "str": pa.string(), "url": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
        "present": pa.bool_(), "date": pa.timestamp("ms", tz="UTC"), "datetime": pa.timestamp("ms", tz="UTC"),
        "price": pa.struct([("amount", pa.decimal128(38, 18)), ("currency", pa.string())]),
    }[scalar]
    return pa.list_(base) if attribute_type.startswith("list[") else base


def _arrow_value(value: Any) -> Any:
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if isinstance(value, dict):
        return {key: _arrow_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_arrow_value(item) for item in value]
    return value


def value_size(value: Any) -> int:
    """About how many bytes ``value`` holds (texts by their length, anything else 8): enough to flush a row
    group before a few thousand half-megabyte records are held at once."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(value_size(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(value_size(item) for item in value)
    return 8


def _write_parquet(source: SourceConfig, records: Iterable[dict[str, Any]], out: IO[bytes],
                   progress: Progress) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ExportUnavailable("Parquet exports need pyarrow: pip install 'harvester[parquet]'") from error

    types = field_types(source)
    schema = pa.schema([(name, _arrow_type(kind)) for name, kind in types.items()])
    count = size = 0
    with pq.ParquetWriter(out, schema) as writer:
        rows: list[dict[str, Any]] = []
        for record in records:
            row = {name: _arrow_value(record.get(name)) for name in types}
            rows.append(row)
            size += value_size(row)
            count += 1
            if len(rows) >= ROW_GROUP or size >= ROW_GROUP_BYTES:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows, size = [], 0
            progress(count)
        if rows or count == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return count


# -- reading back (tests, and anyone loading an export with Harvester's types) --------------------------
def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json_util.loads(line, json_options=JSON_OPTIONS) for line in handle if line.strip()]


def _typed(value: Any, attribute_type: str) -> Any:
    if value is None:
        return None
    if attribute_type.startswith("list["):
        return [_typed(item, attribute_type[5:-1]) for item in value]
    scalar = scalar_type(attribute_type)
    if scalar in ("date", "datetime"):
        return datetime.fromisoformat(value)
    if scalar == "price":
        return {"amount": Decimal128(str(value["amount"])), "currency": value.get("currency")}
    return value


def read_csv(source: SourceConfig, path: str | Path, *, escaped_formulas: bool = True) -> list[dict[str, Any]]:
    """An export in CSV read back with the source's types (the inverse of the CSV writer, its formula escape
    undone unless the file was written with ``escape_formulas=False``)."""
    types = field_types(source)
    records = []
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            record: dict[str, Any] = {}
            for name, cell in row.items():
                kind = types.get(name, "str")
                if cell == "":
                    record[name] = None
                elif kind.startswith("list[") or scalar_type(kind) == "price":
                    record[name] = _typed(json.loads(cell), kind)
                elif kind == "int":
                    record[name] = int(cell)
                elif kind == "float":
                    record[name] = float(cell)
                elif kind in ("bool", "present"):
                    record[name] = cell == "true"
                else:
                    record[name] = _typed(unescape_formula(cell) if escaped_formulas else cell, kind)
            records.append(record)
    return records


def read_parquet(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
