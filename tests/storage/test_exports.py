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
