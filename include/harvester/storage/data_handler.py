"""The data handler: a batch of records written with ONE ``bulk_write`` of upserts (DESIGN.md section 6).

Upserts are keyed by the source's ``output.key`` fields under a unique index, so a retried task (at
least once delivery) rewrites the same document instead of adding one. ``$setOnInsert`` keeps the
first time a record was seen; ``$set`` carries the data, the harvest time and the run.
With ``settings.output_sink == "discard"`` nothing is written (dry runs and the crawl-only bench).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pymongo
from pymongo.collection import Collection
from pymongo.database import Database

from harvester.config.model import SourceConfig
from harvester.connections import mongo_client
from harvester.settings import HarvesterSettings

KEY_INDEX_NAME = "harvester_output_key"
URL_INDEX_NAME = "harvester_url"


@dataclass
class WriteResult:
    """Counts of one batch; ``rejected`` maps a record's position to why it could not be keyed."""

    upserted: int = 0
    modified: int = 0
    matched: int = 0
    discarded: int = 0
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def stored(self) -> int:
        return self.upserted + self.matched + self.discarded


class DataHandler:
    """Writes records of one source at a time; builds the output's unique index on first use."""

    _indexed: set[tuple[str, str, str, tuple[str, ...]]] = set()
    _index_lock = threading.Lock()

    def __init__(self, settings: HarvesterSettings, client: pymongo.MongoClient | None = None) -> None:
        self.settings = settings
        self._client = client

    @property
    def discarding(self) -> bool:
        return self.settings.output_sink == "discard"

    def database(self, source: SourceConfig) -> Database:
        """The source's output database on the server its ``output.connection_id`` names."""
        client = self._client or mongo_client(source.output.connection_id, self.settings)
        return client[source.output.database or self.settings.mongo_database]

    def collection(self, source: SourceConfig) -> Collection:
        collection = self.database(source)[source.output_collection]
        self.ensure_indexes(collection, source)
        return collection

    def ensure_indexes(self, collection: Collection, source: SourceConfig) -> None:
        """The unique key index (the authority against duplicates) and a url index for the URL store.

        No more indexes than that: every index costs each upsert (about 40% on the embedded stand-in).
        """
        address = collection.database.client.address
        marker = (str(address), collection.database.name, collection.name, tuple(source.output.key))
        if marker in self._indexed:
            return
        with self._index_lock:
            if marker in self._indexed:
                return
            collection.create_index([(name, pymongo.ASCENDING) for name in source.output.key],
                                    unique=True, name=KEY_INDEX_NAME)
            if source.output.key[0] != "url":  # the key index already serves url lookups when url leads it
                collection.create_index([("url", pymongo.ASCENDING)], name=URL_INDEX_NAME)
            self._indexed.add(marker)

    def operations(self, source: SourceConfig, records: list[dict[str, Any]], run_id: str | None,
                   now: datetime, result: WriteResult) -> list[pymongo.UpdateOne]:
        """One upsert per distinct key (the last record of a key wins within a batch)."""
        by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
        for position, record in enumerate(records):
            key = tuple(record.get(name) for name in source.output.key)
            if any(value is None for value in key):
                missing = [name for name in source.output.key if record.get(name) is None]
                result.rejected[position] = f"output key field(s) missing: {', '.join(missing)}"
                continue
            by_key[key] = record
        operations = []
        for key, record in by_key.items():
            data = {**record, "harvested_at": now, "run_id": run_id}
            operations.append(pymongo.UpdateOne(
                dict(zip(source.output.key, key, strict=True)),
                {"$set": data, "$setOnInsert": {"first_seen_at": now}},
                upsert=True,
            ))
        return operations

    def write(self, source: SourceConfig, records: list[dict[str, Any]], run_id: str | None = None,
              now: datetime | None = None) -> WriteResult:
        """Store a batch; raises pymongo errors so the caller can retry the whole batch (idempotent)."""
        result = WriteResult()
        now = now or datetime.now(UTC)
        operations = self.operations(source, records, run_id, now, result)
        if not operations:
            return result
        if self.discarding:
            result.discarded = len(operations)
            return result
        written = self.collection(source).bulk_write(operations, ordered=False)
        result.upserted = written.upserted_count
        result.matched = written.matched_count
        result.modified = written.modified_count
        return result
