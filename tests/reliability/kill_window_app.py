"""Harvester's Celery app for a worker that dies in kombu's window (fault-matrix row 11, docs/reliability.md).

Started as ``celery -A tests.reliability.kill_window_app worker``: the app is Harvester's own, and the worker's
main process SIGKILLs itself when kombu has BRPOPped a message and before ``QoS.append`` registers it in
``unacked`` (celery/celery#4354): the message is then in neither the queue nor the unacked set. That is the
state a worker host killed in those few microseconds leaves, which a test cannot hit by timing a kill.
"""

from __future__ import annotations

import os
import signal

from harvester.workers.celery_app import app
from kombu.transport import redis as kombu_redis

__all__ = ["app"]

_register = kombu_redis.QoS.append


def _die_before_registering(self: kombu_redis.QoS, message: object, delivery_tag: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    _register(self, message, delivery_tag)


kombu_redis.QoS.append = _die_before_registering
