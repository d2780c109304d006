"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.distributor.dead_letters import DeadLetter, DeadLetters
    from harvester.distributor.dead_tasks import DeadLettering, DeadTasks, count_down_dead, dead_tasks_of_run
    from harvester.distributor.endings import RetryPolicy, TaskEnding
    from harvester.distributor.hosts import host_of
    from harvester.distributor.intake import Intake
    from harvester.distributor.lending import LentPlaces, PlaceLending
    from harvester.distributor.messages import TaskMessage
    from harvester.distributor.publisher import celery_app_for
    from harvester.distributor.registry import RegisteredSource, RegisteredSources, SourceRegistry
    from harvester.distributor.scripts import script_source
    from harvester.distributor.service import MAX_WAIT_SECONDS, BrowserHandoff, Distributor
    from harvester.distributor.store import (
        Admission,
        FetchTokens,
        RateLimitStore,
        ReapResult,
        StartResult,
        WorkerLostResult,
    )
    from harvester.source_stats import SourceStats

__all__ = [
    "MAX_WAIT_SECONDS", "Admission", "BrowserHandoff", "DeadLetter", "DeadLettering", "DeadLetters", "DeadTasks",
    "Distributor", "FetchTokens", "Intake", "LentPlaces", "PlaceLending", "RateLimitStore", "ReapResult",
    "RegisteredSource", "RegisteredSources", "RetryPolicy", "SourceRegistry", "SourceStats", "StartResult",
    "TaskEnding", "TaskMessage", "WorkerLostResult", "celery_app_for", "count_down_dead", "dead_tasks_of_run",
    "host_of", "script_source",
]
__getattr__, __dir__ = lazy_face(__name__)
