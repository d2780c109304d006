"""The Airflow adapters: the DAG factory (``dags``), the operators and sensor (``operators``), the trigger
(``triggers``) and the Airflow side of the connection factory (``connections``). The only modules of
Harvester that import Airflow; everything else is plain logic they call.

Importing this package registers :class:`~harvester.airflow.connections.AirflowConnectionResolver`,
so connection ids resolve through Airflow in every process that loads a Harvester DAG or trigger.
"""

from harvester import lazy_exports
from harvester.airflow.connections import AirflowConnectionResolver
from harvester.connections import register_resolver

register_resolver(AirflowConnectionResolver())

_EXPORTS = {  # loaded on first use: a DAG file needs only the factory
    "HarvestProgressTrigger": "triggers",
    "HarvestSensor": "operators",
    "PlanOperator": "operators",
    "ProduceOperator": "operators",
    "ReportOperator": "operators",
    "add_producer_tasks": "operators",
    "build_source_dag": "dags",
    "build_source_dags": "dags",
    "asset_event_extra": "assets",
    "output_asset": "assets",
    "schedule_of": "assets",
    "raise_for_invalid_sources": "dags",
}
__all__ = ["AirflowConnectionResolver", *sorted(_EXPORTS)]
__getattr__ = lazy_exports(__name__, _EXPORTS)
