"""The producer: a source's input metadata -> resumable packages -> tasks in the distributor intake.

Names load on first use (see :func:`harvester.lazy_exports`): the DAG file's parse imports this package.
"""

from harvester import lazy_exports

_EXPORTS = {
    "PlanOptions": "planner",
    "Planner": "planner",
    "Producer": "producer",
    "RunMonitor": "progress",
    "RunSettlement": "progress",
    "format_eta": "progress",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
