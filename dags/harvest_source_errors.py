"""Airflow import error for every source file in include/sources/ that does not load.

Declares no DAG: importing this file raises InvalidSourceFiles naming each bad file, line and
field, which the Airflow UI lists under import errors. It is separate from harvest_sources.py
because Airflow marks every DAG of a file with an import error as stale.
"""

from harvester.airflow.dags import raise_for_invalid_sources

raise_for_invalid_sources()
