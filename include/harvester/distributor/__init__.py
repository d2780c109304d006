"""Intake queues, admission against the global rate-limit store, leases, retries and dead letters."""

from harvester import lazy_exports
from harvester.distributor.dead_letters import DeadLetter, DeadLetters
from harvester.distributor.hosts import host_of
from harvester.distributor.intake import Intake, RegisteredSource, read_registered_sources
from harvester.distributor.messages import TaskMessage
from harvester.distributor.scripts import ScriptContract, ScriptPipeline, Scripts, declare_script, optional_text, text
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
    "BrowserTaskBook": "browser_tasks", "CountryCensus": "browser_tasks", "Distributor": "service",
    "celery_app_for": "service", "census_of": "browser_tasks", "script_source": "scripts",
    "task_member": "browser_tasks",
}
__all__ = [
    "Admission", "BrowserTaskBook", "CountryCensus", "DeadLetter", "DeadLetters", "Distributor", "FetchTokens",
    "Intake", "RateLimitStore", "ReapResult", "RegisteredSource", "RetryPolicy", "ScriptContract", "ScriptPipeline",
    "Scripts", "SourceStats", "StartResult", "TaskMessage", "WorkerLostResult", "celery_app_for", "census_of",
    "declare_script", "host_of", "optional_text", "read_registered_sources", "script_source", "task_member", "text",
]
__getattr__ = lazy_exports(__name__, _LAZY)
