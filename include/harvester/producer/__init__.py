"""The producer: a source's input metadata -> resumable packages -> tasks in the distributor intake."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.producer.planner import Planner, PlanOptions
    from harvester.producer.producer import Producer
    from harvester.producer.progress import RunMonitor, RunSettlement, format_eta
    from harvester.producer.reextraction import Reextraction

__all__ = ["PlanOptions", "Planner", "Producer", "Reextraction", "RunMonitor", "RunSettlement", "format_eta"]
__getattr__, __dir__ = lazy_face(__name__)
