"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""

from harvester import lazy_exports
from harvester.distributor.dead_letters import DeadLetter, DeadLetters
from harvester.distributor.dead_tasks import DeadLettering, DeadTasks, count_down_dead, dead_tasks_of_run
from harvester.distributor.hosts import host_of
from harvester.distributor.intake import Intake
from harvester.distributor.messages import TaskMessage
from harvester.distributor.registry import RegisteredSource, RegisteredSources, SourceRegistry
from harvester.distributor.store import (
    Admission,
    FetchTokens,
    RateLimitStore,
    ReapResult,
    RetryPolicy,
    SourceStats,
    StartResult,
    WorkerLostResult,
)

_LAZY = {  # the service loop needs Celery: loaded on first use
    "BrowserHandoff": "service", "Distributor": "service", "MAX_WAIT_SECONDS": "service",
    "celery_app_for": "service", "script_source": "scripts",
}
__all__ = [
    "MAX_WAIT_SECONDS",
    "Admission",
    "BrowserHandoff",
    "DeadLetter",
    "DeadLettering",
    "DeadLetters",
    "DeadTasks",
    "Distributor",
    "FetchTokens",
    "Intake",
    "RateLimitStore",
    "ReapResult",
    "RegisteredSource",
    "RegisteredSources",
    "RetryPolicy",
    "SourceRegistry",
    "SourceStats",
    "StartResult",
    "TaskMessage",
    "WorkerLostResult",
    "celery_app_for",
    "count_down_dead",
    "dead_tasks_of_run",
    "host_of",
    "script_source",
]
__getattr__ = lazy_exports(__name__, _LAZY)
