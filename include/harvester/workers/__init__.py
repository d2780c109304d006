"""The Celery app, its queues and the thin tasks that run scraping work.
"""

from harvester import lazy_exports

_EXPORTS = {
    "PAGESLOTS_QUEUE": "celery_app",
    "app": "celery_app",
    "create_app": "celery_app",
    "harvester_exchange": "celery_app",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
