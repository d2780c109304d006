"""The Airflow adapters: the DAG factory (``dags``), the operators and sensor (``operators``), the trigger
(``triggers``) and the Airflow side of the connection factory (``connections``). The only modules of
Harvester that import Airflow; everything else is plain logic they call.

Importing this package registers :class:`~harvester.airflow.connections.AirflowConnectionResolver`,
so connection ids resolve through Airflow in every process that loads a Harvester DAG or trigger.
"""

from harvester.airflow.connections import AirflowConnectionResolver
from harvester.connections import register_resolver

register_resolver(AirflowConnectionResolver())

__all__ = ["AirflowConnectionResolver"]
