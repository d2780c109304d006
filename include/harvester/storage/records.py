"""Reading a source's stored records back (`harvester records`): newest harvested first, as plain JSON."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pymongo
from bson.decimal128 import Decimal128
from bson.objectid import ObjectId
from pymongo.collection import Collection

from harvester.errors import mongo_storage_errors


@mongo_storage_errors()
def latest_records(collection: Collection, limit: int = 10, run_id: str | None = None,
                   gone: bool | None = None) -> list[dict[str, Any]]:
    """The ``limit`` most recently harvested records (of one run when ``run_id`` is given)."""
    from harvester.storage.lifecycle import gone_filter

    query = {**({"run_id": run_id} if run_id else {}), **gone_filter(gone)}
    return list(collection.find(query).sort("harvested_at", pymongo.DESCENDING).limit(limit))


def plain(value: Any) -> Any:
    """A stored record as JSON can hold it: datetimes in ISO 8601, Decimal128 amounts as exact strings."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal128):
        return str(value.to_decimal())
    if isinstance(value, Decimal | ObjectId):
        return str(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value
