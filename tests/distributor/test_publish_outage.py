"""A Redis outage in the middle of a publish is an outage the distributor waits out, not a crash.

kombu 5.7 publishes a producer batch in one pipeline; when that pipeline fails (the broker died or was failed
over between admission and publish) it raises ``BatchPublishError``, not ``OperationalError``. The
distributor's loop waits out outages only (``REDIS_ERRORS``), so before this test the distributor process died
of the first failover that landed inside a publish (tests/services/test_sentinel_failover.py saw it once in
three runs). The admitted tasks are not lost either way: unconfirmed reservations come back after
``publish_grace_seconds``, and a message delivered twice is dropped at the worker's start call.
"""

from __future__ import annotations

import pytest
from harvester.distributor.publisher import CeleryPublisher, celery_app_for
from harvester.distributor.service import REDIS_ERRORS
from harvester.errors import StorageUnavailableError
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import HarvesterSettings

from tests.fixtures.servers import ServerProcess

pytestmark = pytest.mark.integration

TASK = {"task_id": "t-1", "source": "shop", "url": "http://shop.test/1", "lease_token": "1"}


def test_a_publish_batch_that_fails_with_the_broker_is_a_storage_outage(tmp_path) -> None:
    port = free_port()
    url = f"redis://{LOOPBACK}:{port}/0"
    broker = ServerProcess("broker", ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--save", "",
                                      "--appendonly", "no", "--dir", str(tmp_path)], tmp_path / "broker.log",
                           ready=lambda: readiness.redis_ping(url))
    broker.start(timeout=20)
    try:
        publisher = CeleryPublisher(celery_app_for(HarvesterSettings(redis_url=url)), batch_size=16)
        assert publisher.publish([("default", [TASK])]) == 1  # the producer's connection is pooled now
        broker.kill()
        with pytest.raises(StorageUnavailableError) as raised:
            publisher.publish([("default", [TASK])])
        assert isinstance(raised.value, REDIS_ERRORS)  # what the distributor's loop waits out
        assert "delivery is uncertain" in str(raised.value)
    finally:
        broker.stop()
