"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""

from harvester import lazy_exports
from harvester.distributor.dead_letters import DeadLetter, DeadLetters
from harvester.distributor.hosts import host_of
from harvester.distributor.intake import Intake, RegisteredSource, read_registered_sources
from harvester.distributor.messages import TaskMessage
from harvester.distributor.store import Admission, RateLimitStore, ReapResult, RetryPolicy, SourceStats

_SERVICE = {"Distributor": "service"}  # the service loop needs Celery: loaded on first use
__all__ = [
    "Admission", "DeadLetter", "DeadLetters", "Distributor", "Intake", "RateLimitStore", "ReapResult",
    "RegisteredSource", "RetryPolicy", "SourceStats", "TaskMessage", "host_of", "read_registered_sources",
]
__getattr__ = lazy_exports(__name__, _SERVICE)
