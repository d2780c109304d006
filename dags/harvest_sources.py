"""Airflow DAG factory: one producer DAG ``harvest_<name>`` per file in include/sources/.

Declares only: loading, validation and building live in harvester.config. A bad source file
shows as an import error of this file (naming the YAML file, line and field); the other
sources still get their DAGs.
"""

from harvester.config.airflow_dags import build_source_dags

for _dag in build_source_dags():
    globals()[_dag.dag_id] = _dag
del _dag
