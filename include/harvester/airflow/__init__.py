"""The Airflow adapters: the DAG factory (``dags``), the operators and sensor (``operators``), the trigger
(``triggers``) and the Airflow side of the connection factory (``connections``). The only modules of
Harvester that import Airflow; everything else is plain logic they call.

Importing this package registers :class:`~harvester.airflow.connections.AirflowConnectionResolver`,
so connection ids resolve through Airflow in every process that loads a Harvester DAG or trigger.
"""

from typing import TYPE_CHECKING

from harvester.airflow.connections import AirflowConnectionResolver
from harvester.connections import register_resolver
from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.airflow.assets import asset_event_extra, output_asset, schedule_of
    from harvester.airflow.dags import build_source_dag, build_source_dags, raise_for_invalid_sources
    from harvester.airflow.operators import (
        HarvestSensor,
        PlanOperator,
        ProduceOperator,
        ReportOperator,
        add_producer_tasks,
    )
    from harvester.airflow.triggers import HarvestProgressTrigger

__all__ = [
    "AirflowConnectionResolver", "HarvestProgressTrigger", "HarvestSensor", "PlanOperator", "ProduceOperator",
    "ReportOperator", "add_producer_tasks", "asset_event_extra", "build_source_dag", "build_source_dags",
    "output_asset", "raise_for_invalid_sources", "schedule_of",
]
__getattr__, __dir__ = lazy_face(__name__)

register_resolver(AirflowConnectionResolver())
