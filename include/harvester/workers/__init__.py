"""The Celery app, its queues and the thin tasks that run scraping work."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.queues import PAGESLOTS_QUEUE
    from harvester.workers.celery_app import app, create_app, harvester_exchange

__all__ = ["PAGESLOTS_QUEUE", "app", "create_app", "harvester_exchange"]
__getattr__, __dir__ = lazy_face(__name__)
