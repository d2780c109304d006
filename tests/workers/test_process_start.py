"""A worker process, once ready (Celery's ``worker_process_init``), has its batch runner built and what start-up
made frozen out of the garbage collector's full walks, which then only look at what the batches make."""

from __future__ import annotations

import gc

import pytest
from harvester.workers import batch, tasks

pytestmark = pytest.mark.integration


def test_a_ready_worker_process_has_its_runner_and_its_start_up_objects_frozen(harvester_settings,
                                                                               monkeypatch) -> None:
    monkeypatch.setattr(batch, "_runner", None)  # this process's runner, built by the signal's handler
    gc.unfreeze()
    try:
        tasks._prepare_process()
        frozen = gc.get_freeze_count()
        assert isinstance(batch._runner, batch.BatchRunner)
        assert frozen > 10_000  # the imported stack, not a handful
        made_later: list[list[int]] = [[number] for number in range(10)]
        seen = gc.get_objects()
        assert not any(item is batch._runner for item in seen)  # frozen: out of the collector's sight
        assert any(item is made_later for item in seen)  # what batches make is collected as before
    finally:
        gc.unfreeze()
        if batch._runner is not None:
            batch._runner.close()
