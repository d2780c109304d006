"""What a write changed: new, changed and unchanged records, ``changed_at``, and the change history.

Before a batch's ``bulk_write`` the stored versions of its records are read with ONE query (their keys
``$in``, or an ``$or`` of compound keys), so each record is known to be new, changed (some field differs)
or unchanged. A changed or new record gets ``changed_at``; with ``output.history`` each changed record's
changed fields, with their previous values, the run and the time, go to ``<collection>_history`` with ONE
``insert_many`` BEFORE the records are written.

No multi-document transaction is needed (DESIGN.md section 8), because the writes are ordered and the
history entry's ``_id`` is a digest of (key, run, changed fields and their new values): a batch retried
after its history was written but before its records were finds the same differences and inserts the same
ids again, which the unique ``_id`` refuses (ignored); a batch retried after its records were written finds
nothing changed and writes no history. So a change lands in the history once.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import bson
import pymongo
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, OperationFailure

from harvester.config import SourceConfig
from harvester.errors import MONGO_DUPLICATE_KEY
from harvester.storage.output_codec import OUTPUT_CODEC

log = logging.getLogger(__name__)

# What Harvester writes into a record itself: never compared, never in the history.
METADATA_FIELDS = frozenset({"_id", "first_seen_at", "harvested_at", "run_id", "changed_at", "_http", "gone_at",
                             "gone_reason", "config_version", "requested_urls"})
HISTORY_SUFFIX = "_history"
HISTORY_KEY_INDEX = "harvester_history_key"
HISTORY_TTL_INDEX = "harvester_history_ttl"
HISTORY_RUN_INDEX = "harvester_history_run"
INDEX_OPTIONS_CONFLICT = (85, 86)


def history_collection_name(source: SourceConfig) -> str:
    return f"{source.output_collection}{HISTORY_SUFFIX}"


def _encoded(value: Any) -> bytes:
    """A value as MongoDB stores it: a Decimal and the Decimal128 read back, an aware datetime and the naive UTC
    one read back, compare equal here."""
    return bson.encode({"v": value}, codec_options=OUTPUT_CODEC)


def _key_of(document: dict[str, Any], key: list[str]) -> tuple[Any, ...]:
    return tuple(document.get(name) for name in key)


@dataclass
class Changes:
    """One batch's verdicts, by upsert position: new, changed (with its changed fields) or unchanged."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0
    history_written: int = 0
    back: int = 0  # records that were gone (``gone_at``) and are found again: the write clears their mark
    changed_fields: dict[int, list[str]] = field(default_factory=dict)


class ChangeTracker:
    """Classifies a batch's upserts against what is stored, marks ``changed_at`` and writes the history."""

    _history_indexed: set[tuple[str, str, str, int]] = set()

    def classify(self, collection: Collection, source: SourceConfig, updates: list[dict[str, Any]],
                 filters: list[dict[str, Any]], run_id: str | None, now: datetime) -> Changes:
        """``updates[i]`` is the ``$set`` of the record whose upsert filter is ``filters[i]``; a new or
        changed record's ``$set`` gets ``changed_at``. One find, then (with history) one insert_many."""
        changes = Changes()
        if not updates:
            return changes
        key = source.output.key
        previous = self._stored(collection, key, filters, updates)
        entries: list[dict[str, Any]] = []
        for position, (values, where) in enumerate(zip(updates, filters, strict=True)):
            before = previous.get(_key_of(where, key))
            if before is not None and before.get("gone_at") is not None:
                changes.back += 1
            if before is None:
                changes.new += 1
                values["changed_at"] = now
                continue
            changed = [name for name in values if name not in METADATA_FIELDS
                       and _encoded(values[name]) != _encoded(before.get(name))]
            if not changed:
                changes.unchanged += 1
                continue
            changes.changed += 1
            changes.changed_fields[position] = changed
            values["changed_at"] = now
            if source.output.history:
                entries.append(self._entry(source, where, values, before, changed, run_id, now))
        if entries:
            changes.history_written = self._write_history(collection, source, entries)
        return changes

    @staticmethod
    def _stored(collection: Collection, key: list[str], filters: list[dict[str, Any]],
                updates: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The stored versions of these records, by key, in one query (only the fields the batch writes)."""
        fields = {name for values in updates for name in values if name not in METADATA_FIELDS}
        projection = {name: 1 for name in fields | set(key)}
        projection["_id"], projection["gone_at"] = 0, 1
        if len(key) == 1:
            query: dict[str, Any] = {key[0]: {"$in": [where[key[0]] for where in filters]}}
        else:
            query = {"$or": filters}
        return {_key_of(document, key): document for document in collection.find(query, projection)}

    @staticmethod
    def _entry(source: SourceConfig, where: dict[str, Any], values: dict[str, Any], before: dict[str, Any],
               changed: list[str], run_id: str | None, now: datetime) -> dict[str, Any]:
        digest = hashlib.blake2b(digest_size=12)
        parts = (source.name, _encoded(where), run_id or "", *changed, *(_encoded(values[name]) for name in changed))
        for part in parts:
            digest.update(part if isinstance(part, bytes) else part.encode())
            digest.update(b"\x1f")
        return {
            "_id": digest.hexdigest(),
            "key": dict(where),
            "url": values.get("url", before.get("url")),
            "run_id": run_id,
            "changed_at": now,
            "fields": changed,
            "previous": {name: before.get(name) for name in changed},
            "values": {name: values[name] for name in changed},
        }

    def _write_history(self, collection: Collection, source: SourceConfig, entries: list[dict[str, Any]]) -> int:
        history = collection.database.get_collection(history_collection_name(source),
                                                     codec_options=collection.codec_options)
        self.ensure_history_indexes(history, source)
        try:
            return len(history.insert_many(entries, ordered=False).inserted_ids)
        except BulkWriteError as error:  # a retried batch: its entries are there already (same _id)
            others = [item for item in error.details.get("writeErrors", []) if item.get("code") != MONGO_DUPLICATE_KEY]
            if others or error.details.get("writeConcernErrors"):
                raise
            return int(error.details.get("nInserted", 0))

    @classmethod
    def ensure_history_indexes(cls, history: Collection, source: SourceConfig) -> None:
        """The record's key and time (one record's history, newest first), the run, and the TTL index that
        keeps ``history_retention_days`` (changed when the source changes it)."""
        retention = int(timedelta(days=source.output.history_retention_days).total_seconds())
        marker = (str(history.database.client.address), history.database.name, history.name, retention)
        if marker in cls._history_indexed:
            return
        history.create_index([*((f"key.{name}", pymongo.ASCENDING) for name in source.output.key),
                              ("changed_at", pymongo.DESCENDING)], name=HISTORY_KEY_INDEX)
        history.create_index([("run_id", pymongo.ASCENDING)], name=HISTORY_RUN_INDEX)
        try:
            history.create_index([("changed_at", pymongo.ASCENDING)], name=HISTORY_TTL_INDEX,
                                 expireAfterSeconds=retention)
        except OperationFailure as error:
            if error.code not in INDEX_OPTIONS_CONFLICT:
                raise
            history.drop_index(HISTORY_TTL_INDEX)  # the retention changed: the TTL index is made anew
            history.create_index([("changed_at", pymongo.ASCENDING)], name=HISTORY_TTL_INDEX,
                                 expireAfterSeconds=retention)
        cls._history_indexed.add(marker)
