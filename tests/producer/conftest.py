"""Producer test helpers: a source model and a client of the test MongoDB."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pytest
from harvester.config.model import SourceConfig


@pytest.fixture
def mongo_client(mongo_server) -> Iterator[pymongo.MongoClient]:
    client = mongo_server.client()
    yield client
    client.close()


@pytest.fixture
def make_source() -> Callable[..., SourceConfig]:
    def make(**overrides: Any) -> SourceConfig:
        document: dict[str, Any] = {
            "name": "shop",
            "input": {"seeds": [], "kind": "details", "mongo": {"collection": "shop_input"}},
            "attributes": {"title": {"css": "h1::text"}},
            "batch": {"size": 3, "max_packages": 100},
            "harvesting_lag": "1h",
        }
        document.update(overrides)
        return SourceConfig.model_validate(document)

    return make
