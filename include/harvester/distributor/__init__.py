"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""

from harvester.distributor.dead_letters import DeadLetter, DeadLetters
from harvester.distributor.intake import Intake, RegisteredSource, read_registered_sources
from harvester.distributor.messages import TaskMessage
from harvester.distributor.store import Admission, RateLimitStore, ReapResult, RetryPolicy, SourceStats

__all__ = [
    "Admission", "DeadLetter", "DeadLetters", "Intake", "RateLimitStore", "ReapResult", "RegisteredSource",
    "RetryPolicy", "SourceStats", "TaskMessage", "read_registered_sources",
]
