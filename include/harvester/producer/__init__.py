"""The producer: a source's input metadata -> resumable packages -> tasks in the distributor intake.

Names load on first use (see :func:`harvester.lazy_exports`): the DAG file's parse imports this package.
"""

from harvester import lazy_exports

_EXPORTS = {
    "PackageStore": "packages",
    "PlanOptions": "planner",
    "Planner": "planner",
    "Producer": "producer",
    "RunMonitor": "progress",
    "planned_task_id": "packages",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
