"""Airflow DAG factory: one producer DAG ``harvest_<name>`` per valid file in include/sources/.

Declares only: loading, validation and building live in harvester.config. Files that do not load
are reported by harvest_source_errors.py, so a typo in one source never hides the others.
"""

from harvester.airflow.dags import build_source_dags

for _dag in build_source_dags():
    globals()[_dag.dag_id] = _dag
