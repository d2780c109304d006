"""The distributor's view of the registered sources at thousands of sources: the index each second, a new
source read at once, every registration again only every SOURCES_FULL_REFRESH_SECONDS."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import Intake, TaskMessage, known_sources
from harvester.distributor.registry import SourceRegistry
from harvester.distributor.service import Distributor
from harvester.redis_keys import SOURCES_INDEX
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source

pytestmark = pytest.mark.integration


def test_a_new_source_is_admitted_at_once_and_known_ones_are_not_read_again(
        redis_client: redis.Redis, settings: HarvesterSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    intake = Intake(redis_client, settings)
    for name in ("alpha", "beta"):
        intake.register_source(make_source(name))
    reads: list[list[str] | None] = []  # None: every registration read; else the names read one by one
    inside_read_all: list[bool] = []
    read_all, queue_read = SourceRegistry.read_all, SourceRegistry.queue_read

    def counting_read_all(self: SourceRegistry) -> object:
        reads.append(None)
        inside_read_all.append(True)
        try:
            return read_all(self)
        finally:
            inside_read_all.pop()

    def counting_queue_read(pipeline: object, name: str) -> None:
        if not inside_read_all:
            reads.append([name])
        queue_read(pipeline, name)

    monkeypatch.setattr(SourceRegistry, "read_all", counting_read_all)
    monkeypatch.setattr(SourceRegistry, "queue_read", staticmethod(counting_queue_read))
    monkeypatch.setattr(known_sources, "SOURCES_REFRESH_SECONDS", 0.0)  # look at the index every round
    distributor = Distributor(redis_client, settings)
    distributor.run_round()
    assert reads == [None] and set(distributor.known.current()) == {"alpha", "beta"}

    gamma = make_source("gamma")
    intake.push(gamma, [TaskMessage(source="gamma", url="http://gamma.test/1")])
    assert distributor.run_round().admitted == 1  # the new source's task, in the first round that sees it
    assert reads[1:] == [["gamma"]]  # only the new source's registration was read
    redis_client.srem(SOURCES_INDEX, "beta")
    distributor.run_round()
    assert set(distributor.known.current()) == {"alpha", "gamma"} and reads[1:] == [["gamma"]]

    monkeypatch.setattr(known_sources, "SOURCES_FULL_REFRESH_SECONDS", 0.0)
    distributor.run_round()
    assert reads[-1] is None  # every registration again (a changed queue or priority is seen)
